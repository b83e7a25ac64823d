"""Load the dashboard's pages over HTTP as Dash's renderer does, without a browser: the shell's
layout, the page's layout (Dash Pages' router callback), then every server callback in the
order the renderer fires them, each fed with the values the ones before it returned.

Used by ``benchmarks/bench_dashboard.py`` (callback latency per page) and by the tests
(forged callbacks: the same page load with the shared filters forced to another tenant).

The callbacks come from the served app's ``/_dash-dependencies``, the pages from
``dash.page_registry`` (:func:`registered_pages`), so pages added later are covered as they
are registered. Clientside callbacks run in a browser only and are left out.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, cast

import requests

#: Wildcards of pattern-matching ids, as ``/_dash-dependencies`` writes them.
_ALL, _MATCH, _ALLSMALLER = ["ALL"], ["MATCH"], ["ALLSMALLER"]
#: The most times one callback fires in one page load (a loop between callbacks stops there).
MAX_FIRINGS = 4
#: The router callback of Dash Pages: it returns the page's layout.
ROUTER = ".._pages_content.children..._pages_store.data.."


class Transport(Protocol):
    """An HTTP client logged in to the served app: ``requests`` or a browser's context."""

    def get(self, path: str) -> tuple[int, str]: ...

    def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, str]: ...


@dataclasses.dataclass
class RequestsTransport:
    """A :class:`Transport` over a ``requests.Session`` (a form login keeps its cookie)."""

    base: str
    session: requests.Session = dataclasses.field(default_factory=requests.Session)
    timeout_s: float = 120.0

    def get(self, path: str) -> tuple[int, str]:
        got = self.session.get(self.base + path, timeout=self.timeout_s)
        return got.status_code, got.text

    def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, str]:
        got = self.session.post(self.base + path, json=body, timeout=self.timeout_s)
        return got.status_code, got.text


def form_login(base: str, user: str, password: str) -> RequestsTransport:
    """Log in through the form at ``/login`` (its CSRF token, then the signed cookie), as a
    person does: every later request carries the cookie, and no password is checked again."""
    transport = RequestsTransport(base)
    form = transport.session.get(f"{base}/login", timeout=30).text
    found = re.search(r'name="csrf" value="([^"]+)"', form)
    if found is None:
        raise RuntimeError(f"{base}/login served no login form")
    reply = transport.session.post(
        f"{base}/login",
        data={"user": user, "password": password, "csrf": found[1], "next": "/"},
        allow_redirects=False,
        timeout=30,
    )
    if reply.status_code != 302:
        raise RuntimeError(f"logging in as {user} failed: {reply.status_code}")
    return transport


# -- the pages --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Page:
    """A registered page: its name, its path (a template such as ``/gpu/<uuid>`` for pages
    with variables) and a file-name-safe slug of its name."""

    name: str
    path: str
    templated: bool

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "page"

    def url_path(self, values: Mapping[str, str]) -> str:
        """The path with each ``<variable>`` filled from ``values``."""

        def fill(m: re.Match[str]) -> str:
            if m[1] not in values:
                raise KeyError(
                    f"page {self.name} ({self.path}) needs a value for <{m[1]}>: add one to "
                    "the template values the tests and the bench give"
                )
            return values[m[1]]

        return re.sub(r"<([^<>]+)>", fill, self.path)


def registered_pages() -> list[Page]:
    """Every page in ``dash.page_registry``, as the dashboard registers them (the registry
    fills when the app is built; the warehouse is not touched by building it)."""
    import dash

    from dashboards.app import create_app

    create_app(cast(Any, None))
    return [
        Page(p["name"], p.get("path_template") or p["path"], bool(p.get("path_template")))
        for p in dash.page_registry.values()
    ]


def shell_links(transport: Transport) -> list[str]:
    """The paths the shell's navigation links to, from the served ``/_dash-layout``."""
    status, text = transport.get("/_dash-layout")
    if status != 200:
        raise RuntimeError(f"/_dash-layout answered {status}: {text[:200]}")
    ids = [c["props"].get("id") for c in walk(json.loads(text))]
    return [str(i["path"]) for i in ids if isinstance(i, dict) and i.get("type") == "shell-nav"]


# -- components and callbacks -----------------------------------------------------------------
def walk(tree: Any) -> Iterator[dict[str, Any]]:
    """Every component in a layout's JSON (in children and in any other prop), depth first:
    dicts with ``type``, ``namespace`` and ``props``."""
    if isinstance(tree, list):
        for item in tree:
            yield from walk(item)
    elif isinstance(tree, dict):
        if "props" in tree and "type" in tree and "namespace" in tree:
            if not isinstance(tree["props"], dict):
                tree = {**tree, "props": {}}
            yield tree
            for value in tree["props"].values():
                yield from walk(value)
        else:
            for value in tree.values():
                yield from walk(value)


def id_key(ident: str | dict[str, Any]) -> str:
    """A component id as Dash writes it in requests' and responses' keys."""
    if isinstance(ident, dict):
        return json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return ident


@dataclasses.dataclass(frozen=True)
class Dep:
    """One input, state or output of a callback: an id (a pattern for wildcards) and a prop."""

    ident: Any
    prop: str

    @property
    def wildcard(self) -> bool:
        return isinstance(self.ident, dict) and any(
            v in (_ALL, _MATCH, _ALLSMALLER) for v in self.ident.values()
        )

    @property
    def matching(self) -> bool:
        return isinstance(self.ident, dict) and _MATCH in self.ident.values()

    def matches(self, ident: Any) -> bool:
        if not isinstance(self.ident, dict):
            return self.ident == ident
        if not isinstance(ident, dict) or ident.keys() != self.ident.keys():
            return False
        return all(
            want in (_ALL, _MATCH, _ALLSMALLER) or want == ident[k]
            for k, want in self.ident.items()
        )


def _dep(text: str) -> Dep:
    ident, prop = text.rsplit(".", 1)
    return Dep(json.loads(ident) if ident.startswith("{") else ident, prop)


def _item(raw: Mapping[str, str]) -> Dep:
    ident = raw["id"]
    return Dep(json.loads(ident) if ident.startswith("{") else ident, raw["property"])


@dataclasses.dataclass(frozen=True)
class Callback:
    """One server callback of ``/_dash-dependencies``."""

    key: str  # its output string: how requests name it
    outputs: tuple[Dep, ...]
    inputs: tuple[Dep, ...]
    state: tuple[Dep, ...]
    prevent_initial_call: bool
    multi: bool

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Callback:
        key = str(raw["output"])
        multi = key.startswith("..") and key.endswith("..")
        parts = key[2:-2].split("...") if multi else [key]
        outputs = () if raw.get("no_output") else tuple(_dep(p) for p in parts)
        return cls(
            key,
            outputs,
            tuple(_item(i) for i in raw["inputs"]),
            tuple(_item(s) for s in raw["state"]),
            bool(raw.get("prevent_initial_call")),
            multi,
        )

    def reads(self, ident: Any, prop: str) -> bool:
        return any(d.prop == prop and d.matches(ident) for d in self.inputs)

    def writes(self, other: Callback) -> bool:
        """Whether one of this callback's outputs is one of ``other``'s inputs."""
        return any(
            o.prop == i.prop and (o.matches(i.ident) or i.matches(o.ident))
            for o in self.outputs
            for i in other.inputs
        )


def dependencies(transport: Transport) -> list[Callback]:
    """The served app's server callbacks (clientside ones run in a browser only)."""
    status, text = transport.get("/_dash-dependencies")
    if status != 200:
        raise RuntimeError(f"/_dash-dependencies answered {status}: {text[:200]}")
    return [Callback.parse(d) for d in json.loads(text) if not d.get("clientside_function")]


# -- one page load ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Call:
    """One callback request of a page load: which, for whom (``shell``, ``layout`` or the
    page), how it went and how long it took."""

    callback: str
    part: str
    status: int
    ms: float
    text: str  # the answer
    body: Mapping[str, Any]  # the request
    action: bool = False

    @property
    def failed(self) -> bool:
        return self.status >= 400


@dataclasses.dataclass
class Load:
    """What a page load did: its calls in order, and every component's props at the end."""

    path: str
    calls: list[Call]
    props: dict[str, dict[str, Any]]

    def page_calls(self) -> list[Call]:
        """The calls of the page's own callbacks (not the shell's, not the router's)."""
        return [c for c in self.calls if c.part not in ("shell", "layout")]


class Replay:
    """Page loads against one served app, logged in through ``transport``."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.callbacks = dependencies(transport)
        status, text = transport.get("/_dash-layout")
        if status != 200:
            raise RuntimeError(f"/_dash-layout answered {status}: {text[:200]}")
        self.shell = json.loads(text)
        self.shell_ids = {id_key(c["props"]["id"]) for c in walk(self.shell) if "id" in c["props"]}

    def load(
        self,
        path: str,
        query: str = "",
        *,
        force: Mapping[tuple[str, str], Any] | None = None,
        actions: bool = False,
        part: str | None = None,
    ) -> Load:
        """Load ``path?query`` as the renderer would: the Locations report the URL, every
        callback whose inputs are there fires (predecessors first), and those whose inputs a
        response changed fire again. ``force`` pins props (a forged filters state) whatever
        the callbacks return; with ``actions``, each button of the page is then clicked once
        (``n_clicks``) and the first row of each grid selected."""
        run = _Run(self, path, query, dict(force or {}), part or path)
        run.settle()
        if actions:
            run.act()
        return Load(path, run.calls, run.props)


class _Run:
    """The state of one page load: components' props, callbacks queued, calls made."""

    def __init__(
        self,
        replay: Replay,
        path: str,
        query: str,
        force: dict[tuple[str, str], Any],
        part: str,
    ) -> None:
        self.replay, self.force, self.part = replay, force, part
        self.props: dict[str, dict[str, Any]] = {}
        self.ids: dict[str, Any] = {}
        self.calls: list[Call] = []
        self.fired: dict[tuple[str, str], int] = {}
        self.queue: list[tuple[Callback, dict[str, Any] | None, list[str]]] = []
        self._register(replay.shell)
        changed: list[tuple[str, str]] = []
        for comp in walk(replay.shell):  # what a dcc.Location reports when it mounts
            if comp["type"] == "Location" and "id" in comp["props"]:
                key = id_key(comp["props"]["id"])
                self.props[key].update(pathname=path, search=query, href=path + query, hash="")
                changed += [(key, "pathname"), (key, "search"), (key, "href")]
        for (key, prop), value in force.items():
            self.props.setdefault(key, {})[prop] = value
            self.ids.setdefault(key, key)
            changed.append((key, prop))
        self._trigger(changed)

    # components
    def _register(self, tree: Any) -> None:
        for comp in walk(tree):
            props = comp["props"]
            if "id" in props:
                key = id_key(props["id"])
                self.ids[key] = props["id"]
                self.props[key] = dict(props)

    def _resolve(self, dep: Dep) -> list[Any]:
        if not dep.wildcard:
            return [dep.ident] if id_key(dep.ident) in self.ids else []
        return [i for i in self.ids.values() if dep.matches(i)]

    def _value(self, ident: Any, prop: str) -> Any:
        return self.props.get(id_key(ident), {}).get(prop)

    # which callbacks fire
    def _ready(self, cb: Callback) -> bool:
        """Whether its components are on the page (an ALL wildcard may find none)."""
        return all(
            self._resolve(d) or (d.wildcard and not d.matching) for d in (*cb.inputs, *cb.outputs)
        )

    def _trigger(self, changed: list[tuple[str, str]], source: Callback | None = None) -> None:
        """Queue the callbacks that ``changed`` props feed (not ``source``, which wrote them:
        Dash does not call a callback again for its own outputs), and those never called yet
        whose components are all on the page now (their initial call)."""
        queued = {(cb.key, json.dumps(m, sort_keys=True)) for cb, m, _ in self.queue}
        for cb in self.replay.callbacks:
            if not self._ready(cb):
                continue
            hits = [
                f"{k}.{p}"
                for k, p in changed
                if cb is not source and cb.reads(self.ids.get(k, k), p)
            ]
            never = not any(key == cb.key for key, _ in self.fired)
            if not hits and not (never and not cb.prevent_initial_call):
                continue
            for match in self._matches(cb):
                mark = (cb.key, json.dumps(match, sort_keys=True))
                if mark not in queued and self.fired.get(mark, 0) < MAX_FIRINGS:
                    self.queue.append((cb, match, hits))
                    queued.add(mark)

    def _matches(self, cb: Callback) -> list[dict[str, Any] | None]:
        """One call per component a MATCH wildcard finds (its keys' values); else one call."""
        pattern = next((d for d in (*cb.outputs, *cb.inputs) if d.matching), None)
        if pattern is None:
            return [None]
        keys = [k for k, v in pattern.ident.items() if v == _MATCH]
        return [{k: i[k] for k in keys} for i in self._resolve(pattern)]

    def settle(self) -> None:
        """Fire what is queued, each callback after those queued that feed it."""
        while self.queue:
            pick = next(
                (
                    n
                    for n, (cb, _m, _t) in enumerate(self.queue)
                    if not any(o is not cb and o.writes(cb) for o, _, _ in self.queue)
                ),
                0,
            )
            self._fire(*self.queue.pop(pick))

    def act(self) -> None:
        """Click every button of the page's callbacks once, select each grid's first row and
        have each infinite grid ask for its first block, one at a time, each followed by what
        it triggers."""
        for cb in self.replay.callbacks:
            for dep in cb.inputs:
                for ident in self._resolve(dep):
                    key = id_key(ident)
                    value = self._action_value(key, dep.prop)
                    # a Dash Pages app: the shell's own controls are not the page's
                    shell = "_pages_content" in self.replay.shell_ids
                    if value is None or (shell and key in self.replay.shell_ids):
                        continue
                    self.props[key][dep.prop] = value
                    before = len(self.calls)
                    self._trigger([(key, dep.prop)])
                    self.settle()
                    self.calls[before:] = [
                        dataclasses.replace(c, action=True) for c in self.calls[before:]
                    ]

    def _action_value(self, key: str, prop: str) -> Any:
        props = self.props.get(key, {})
        if prop == "n_clicks":
            return int(props.get("n_clicks") or 0) + 1
        if prop == "getRowsRequest" and props.get("rowModelType") == "infinite":
            # an infinite grid asks for its first block once shown, and again when told to
            # forget its blocks (a clientside callback, after a pick): acted after the picks
            block = (props.get("dashGridOptions") or {}).get("cacheBlockSize", 100)
            return {"startRow": 0, "endRow": block, "sortModel": [], "filterModel": {}}
        rows = props.get("rowData")
        if prop in ("selectedRows", "cellClicked") and isinstance(rows, list) and rows:
            first = rows[0]
            if prop == "selectedRows":
                return [first]
            column = next(iter(first), "")
            return {"rowIndex": 0, "colId": column, "value": first.get(column)}
        return None

    # one request
    def _items(
        self, deps: tuple[Dep, ...], match: dict[str, Any] | None, values: bool
    ) -> list[Any]:
        items: list[Any] = []
        for dep in deps:
            found = self._resolve(dep)
            if dep.matching and match is not None:
                found = [i for i in found if all(i.get(k) == v for k, v in match.items())]
            rows = [
                {"id": i, "property": dep.prop}
                | ({"value": self._value(i, dep.prop)} if values else {})
                for i in found
            ]
            items.append(rows if dep.wildcard and not dep.matching else rows[0])
        return items

    def _fire(self, cb: Callback, match: dict[str, Any] | None, triggers: list[str]) -> None:
        mark = (cb.key, json.dumps(match, sort_keys=True))
        self.fired[mark] = self.fired.get(mark, 0) + 1
        outputs = self._items(cb.outputs, match, values=False)
        body = {
            "output": cb.key,
            "outputs": outputs if cb.multi or not outputs else outputs[0],
            "inputs": self._items(cb.inputs, match, values=True),
            "state": self._items(cb.state, match, values=True),
            "changedPropIds": triggers,
        }
        started = time.perf_counter()
        status, text = self.replay.transport.post("/_dash-update-component", body)
        ms = (time.perf_counter() - started) * 1000
        self.calls.append(Call(cb.key, self._part(cb), status, ms, text, body))
        if status != 200:
            return  # 204: PreventUpdate; 4xx/5xx: recorded in the call
        reply = json.loads(text)
        changed: list[tuple[str, str]] = []
        for updates in (reply.get("response") or {}, reply.get("sideUpdate") or {}):
            for key, props in updates.items():
                for prop, value in props.items():
                    if (key, prop) in self.force:
                        continue
                    if prop == "children":
                        self._register(value)
                    self.props.setdefault(key, {})[prop] = value
                    self.ids.setdefault(key, json.loads(key) if key.startswith("{") else key)
                    changed.append((key, prop))  # as the renderer: answered is changed
        self._trigger(changed, source=cb)

    def _part(self, cb: Callback) -> str:
        if cb.key == ROUTER:
            return "layout"
        ids = [id_key(i) for d in cb.outputs for i in self._resolve(d)]
        return "shell" if ids and all(i in self.replay.shell_ids for i in ids) else self.part
