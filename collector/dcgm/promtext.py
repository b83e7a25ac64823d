"""The Prometheus text exposition format (0.0.4): a focused, fault-tolerant parser, and a fetcher.

Used by :mod:`collector.dcgm.collector` on dcgm-exporter ``/metrics`` bodies; nothing here is
specific to DCGM. :class:`TextFetcher` gets a body over HTTP with bounded retries (see its
docstring).

The parser reads the subset of the format that exporters actually write — ``# HELP``/``# TYPE``
comments and sample lines ``name{label="value",...} value [timestamp_ms]`` — and, unlike
``prometheus_client.parser.text_string_to_metric_families``, it never raises: a line it cannot
read becomes a :class:`LineError` (line number, offending part, reason, raw line) and the rest
of the body is still parsed. Every value is a float (integers are exact up to 2**53; DCGM's
int64 blank sentinels stay recognisable because they round to 2**63).

Why not ``prometheus_client``'s parser:

- speed: dcgm-exporter repeats the *same* label set on every metric of a GPU, so each line is
  matched by one C-level regex and each distinct ``{...}`` text is parsed once per body (a
  cache), where ``prometheus_client`` tokenises every label set character by character in
  Python: an order of magnitude faster on real bodies (``benchmarks/bench_dcgm.py``; figures
  in ``benchmarks/RESULTS.md``);
- robustness: it raises ``ValueError`` at the first malformed line and stops, so one bad line
  would cost the rest of the scrape (and, through ``list()``, what was read before it);
- fidelity: it renames the samples of a counter family without a ``_total`` suffix
  (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` comes back as
  ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total``), so metric names no longer match the
  exporter's catalogue;
- safety: it has no limit on line or label length; this parser rejects lines over
  ``max_line_chars`` before running any regex on them, and label values over
  ``max_label_chars``.

The two parsers agree on every sample of the real bodies (names modulo the ``_total`` rename,
labels, values as floats); ``tests/test_dcgm.py`` checks that.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import NamedTuple

import requests
import urllib3

from gpuledger_errors import SourceError

#: A sample line: metric name, optional ``{labels}``, value, optional integer timestamp (ms).
#: Greedy ``(.*)`` finds the last ``}`` that is followed by a value, so ``}`` inside a quoted
#: label value is fine; the label text is validated separately by :data:`_LABELS_FULL`.
_LINE = re.compile(
    r"[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*"
)
_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_QUOTED = r'"([^"\\\n]*(?:\\.[^"\\\n]*)*)"'  # unrolled loop: linear, no backtracking blow-up
_PAIR = rf"[ \t]*({_NAME})[ \t]*=[ \t]*{_QUOTED}[ \t]*"
_LABEL = re.compile(_PAIR)
_PAIR_NC = rf"[ \t]*{_NAME}[ \t]*=[ \t]*\"[^\"\\\n]*(?:\\.[^\"\\\n]*)*\"[ \t]*"
_LABELS_FULL = re.compile(rf"(?:{_PAIR_NC},)*(?:{_PAIR_NC})?[ \t]*")
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_TYPE = re.compile(r"#[ \t]+TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]+(\w+)[ \t]*")
_TIMESTAMP = re.compile(r"-?[0-9]{1,19}")

#: Lines longer than this are rejected before any regex sees them (hostile input defence).
MAX_LINE_CHARS = 64 * 1024
#: Label values longer than this are rejected (dcgm-exporter's longest are pod names, < 254).
MAX_LABEL_CHARS = 1024


class PromSample(NamedTuple):
    """One sample line. ``labels`` may be shared between samples: treat it as read-only."""

    name: str
    labels: Mapping[str, str]
    value: float  # may be NaN or +-Inf: the caller decides what those mean
    timestamp_ms: int | None
    lineno: int  # 1-based
    line: str  # the raw line, for quarantine payloads


class LineError(NamedTuple):
    """A line that could not be read: which part, the offending text, and why."""

    lineno: int
    part: str  # "line", "labels", "value", "timestamp", or a label name
    value: str
    reason: str
    line: str


class Exposition(NamedTuple):
    """What :func:`parse_text` read from one body."""

    samples: list[PromSample]
    types: dict[str, str]  # metric name -> counter/gauge/... from ``# TYPE`` lines
    errors: list[LineError]
    skipped: int  # well-formed sample lines whose metric name was not wanted
    skipped_names: set[str]


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), value)


def _parse_labels(text: str, max_label_chars: int) -> tuple[dict[str, str] | None, str, str, str]:
    """Parse the inside of ``{...}``: (labels, "", "", "") or (None, part, value, reason)."""
    if _LABELS_FULL.fullmatch(text) is None:
        return None, "labels", text, "malformed label set"
    labels: dict[str, str] = {}
    for name, raw in _LABEL.findall(text):
        if len(raw) > max_label_chars:
            return (
                None,
                name,
                raw[:64] + "...",
                f"label value is {len(raw)} characters, over the {max_label_chars} limit",
            )
        if name in labels:
            return None, name, raw, "duplicate label name"
        labels[name] = _unescape(raw) if "\\" in raw else raw
    return labels, "", "", ""


def parse_value(text: str) -> float | None:
    """Parse a sample value the way Prometheus does (``NaN``, ``+Inf``, ``-Inf`` allowed)."""
    if "_" in text or not text.isascii():  # float() takes "1_000" and "١"; Prometheus does not
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_text(
    text: str,
    wanted: Container[str] | None = None,
    *,
    max_line_chars: int = MAX_LINE_CHARS,
    max_label_chars: int = MAX_LABEL_CHARS,
) -> Exposition:
    """Parse a text-format body. Never raises on malformed input.

    ``wanted``: when given, sample lines of other metric names are counted in ``skipped`` and
    not label-parsed (they are still checked to be sample-shaped lines). Label sets are parsed
    once per distinct ``{...}`` text; samples with the same text share one ``labels`` dict.
    """
    samples: list[PromSample] = []
    types: dict[str, str] = {}
    errors: list[LineError] = []
    skipped = 0
    skipped_names: set[str] = set()
    cache: dict[str, dict[str, str] | tuple[str, str, str]] = {}
    empty: dict[str, str] = {}
    line_match = _LINE.fullmatch
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line or line.isspace():
            continue
        if len(line) > max_line_chars:
            errors.append(
                LineError(
                    lineno,
                    "line",
                    line[:64] + "...",
                    f"line is {len(line)} characters, over the {max_line_chars} limit",
                    line,
                )
            )
            continue
        if line.lstrip().startswith("#"):
            m = _TYPE.fullmatch(line.strip())
            if m is not None:
                types[m.group(1)] = m.group(2).lower()
            continue
        m = line_match(line)
        if m is None:
            errors.append(LineError(lineno, "line", line, "not a sample line", line))
            continue
        name, label_text, value_text, ts_text = m.groups()
        if wanted is not None and name not in wanted:
            skipped += 1
            skipped_names.add(name)
            continue
        value = parse_value(value_text)
        if value is None:
            errors.append(LineError(lineno, "value", value_text, "not a number", line))
            continue
        timestamp: int | None = None
        if ts_text is not None:
            if _TIMESTAMP.fullmatch(ts_text) is None:
                errors.append(
                    LineError(
                        lineno, "timestamp", ts_text, "not an integer millisecond timestamp", line
                    )
                )
                continue
            timestamp = int(ts_text)
        if label_text is None or not label_text.strip():
            labels: dict[str, str] = empty
        else:
            parsed = cache.get(label_text)
            if parsed is None:
                got, part, bad, reason = _parse_labels(label_text, max_label_chars)
                parsed = got if got is not None else (part, bad, reason)
                cache[label_text] = parsed
            if isinstance(parsed, tuple):
                errors.append(LineError(lineno, parsed[0], parsed[1], parsed[2], line))
                continue
            labels = parsed
        samples.append(PromSample(name, labels, value, timestamp, lineno, line))
    return Exposition(samples, types, errors, skipped, skipped_names)


# --------------------------------------------------------------------------- fetching


class ScrapeError(SourceError):
    """A target gave no usable body: ``retryable`` (whether another attempt may help) and the
    number of ``attempts`` made."""

    def __init__(self, message: str, retryable: bool, attempts: int = 1):
        super().__init__(message)
        self.retryable = retryable
        self.attempts = attempts


_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_FATAL_REQUEST_ERRORS = (
    requests.exceptions.InvalidURL,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.URLRequired,
    requests.exceptions.TooManyRedirects,
    requests.exceptions.InvalidHeader,
)


class TextFetcher:
    """GETs text-format bodies with a ``requests.Session``, retrying what a retry can fix.

    ``timeout_s`` is ``(connect, read)`` seconds (a number sets both); each attempt also stops at
    ``deadline_s`` in total, so a server that trickles bytes cannot hold a scrape. ``retries``
    extra attempts (at most 10) follow a connection error, a timeout or HTTP 408/425/429/5xx,
    after ``min(backoff_max_s, backoff_s * 2**n)`` seconds jittered to 50-100 % of that ("equal
    jitter": agents restarted together do not retry in lockstep, and no retry is immediate).
    Other HTTP statuses, bad URLs and bodies over ``max_body_bytes`` are not retried.
    ``sleep`` and ``rng`` are injectable for tests.
    """

    def __init__(
        self,
        session: requests.Session | None = None,
        timeout_s: float | tuple[float, float] = (2.0, 5.0),
        retries: int = 2,
        *,
        backoff_s: float = 0.2,
        backoff_max_s: float = 2.0,
        deadline_s: float = 15.0,
        max_body_bytes: int = 16 * 2**20,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ):
        if not 0 <= retries <= 10:
            raise ValueError(f"retries must be between 0 and 10, not {retries}")
        self._own_session = session is None
        self.session = session or requests.Session()
        self.timeout = timeout_s if isinstance(timeout_s, tuple) else (timeout_s, timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.deadline_s = deadline_s
        self.max_body_bytes = max_body_bytes
        self._sleep = sleep
        self._rng = rng or random.Random()

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (0-based): exponential, capped, jittered."""
        ceiling = min(self.backoff_max_s, self.backoff_s * (2**attempt))
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def fetch(self, url: str) -> tuple[str, int]:
        """The body of ``url`` and the attempts it took; :class:`ScrapeError` when none worked."""
        attempt = 0
        while True:
            try:
                return self._get(url), attempt + 1
            except ScrapeError as exc:
                if not exc.retryable or attempt >= self.retries:
                    suffix = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise ScrapeError(f"{exc}{suffix}", exc.retryable, attempt + 1) from exc
            self._sleep(self.backoff(attempt))
            attempt += 1

    def _get(self, url: str) -> str:
        """One HTTP attempt: the body as text, or ScrapeError."""
        started = time.monotonic()
        try:
            with self.session.get(
                url,
                timeout=self.timeout,
                stream=True,
                headers={"Accept": "text/plain;version=0.0.4"},
            ) as reply:
                if reply.status_code != 200:
                    raise ScrapeError(
                        f"{url}: HTTP {reply.status_code}", reply.status_code in _RETRY_STATUS
                    )
                body = self._read_body(url, reply, started)
        except _FATAL_REQUEST_ERRORS as exc:  # retrying cannot fix these
            raise ScrapeError(f"{url}: {type(exc).__name__}: {exc}", False) from exc
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # RequestException is an OSError
            raise ScrapeError(f"{url}: {type(exc).__name__}: {exc}", True) from exc
        # The format is UTF-8 by definition; requests would guess ISO-8859-1 for text/plain.
        return body.decode("utf-8", errors="replace")

    def _read_body(self, url: str, reply: requests.Response, started: float) -> bytes:
        """Read the body as it arrives (``read1``), stopping at the size cap and the deadline.

        ``read1`` returns whatever bytes have arrived, so the deadline is checked even when a
        server trickles a byte at a time (``iter_content`` would wait for a full chunk).
        """
        read1 = getattr(reply.raw, "read1", None)
        pieces: Iterable[bytes]
        if read1 is not None:
            pieces = iter(lambda: read1(64 * 1024, decode_content=True), b"")
        else:  # urllib3 < 2
            pieces = reply.iter_content(64 * 1024)
        chunks: list[bytes] = []
        size = 0
        for chunk in pieces:
            size += len(chunk)
            if size > self.max_body_bytes:
                raise ScrapeError(f"{url}: body over {self.max_body_bytes} bytes", False)
            if time.monotonic() - started > self.deadline_s:
                raise ScrapeError(f"{url}: body not complete within {self.deadline_s:g} s", True)
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        """Close the session if this fetcher made it."""
        if self._own_session:
            self.session.close()
