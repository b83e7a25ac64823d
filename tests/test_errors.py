"""Every error a room defines derives from gpuledger_errors.GpuledgerError.

The command line turns a GpuledgerError into one line and an exit status; anything else is
a bug and keeps its traceback. So a new error class that forgets the root would show users
a traceback for a mistake of theirs: this walks the packages and finds it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from gpuledger_errors import ConfigError, GpuledgerError, InputError, SourceError

PACKAGES = ("collector", "warehouse", "gpuledger", "dashboards", "reports", "scheduler_hooks")

#: Modules that cannot be imported on their own (Dash pages register with a created app).
UNIMPORTABLE = {"dashboards.pages.overview"}

#: Exceptions that only signal between two pieces of code and never reach a user.
CONTROL_FLOW = {
    # a sink tells the pipeline to keep a batch in the spool, or to set it aside
    "collector.pipeline.SinkUnavailable",
    "collector.pipeline.SinkRejected",
    # one unreadable row or field: caught at once and written down as a Reject
    "collector.traces.alibaba._BadRow",
    "collector.slurm.collector._Bad",
    "collector.kubernetes.objects._Bad",
}


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        path = importlib.import_module(package).__path__
        names += [m.name for m in pkgutil.walk_packages(path, package + ".")]
    # Dash loads the page modules itself when an app is made (they register their page then);
    # imported here they would register again, under another name, or refuse without an app
    return [n for n in names if n not in UNIMPORTABLE and not n.startswith("dashboards.pages.")]


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_project_exception_derives_from_the_root() -> None:
    classes = _exception_classes()
    strays = sorted(
        name
        for name, cls in classes.items()
        if not issubclass(cls, GpuledgerError) and name not in CONTROL_FLOW
    )
    assert strays == [], "derive these from a gpuledger_errors class, or list them above"
    assert classes.keys() >= CONTROL_FLOW, "the allow-list names a class that is gone"
    assert not any(issubclass(classes[n], GpuledgerError) for n in CONTROL_FLOW)
    assert len(classes) >= 20  # the walk found the rooms' errors, not an empty package


@pytest.mark.parametrize(
    ("where", "name", "kind"),
    [
        ("gpuledger.settings", "SettingsError", ConfigError),
        ("warehouse.ingest.coalesce", "CoalesceError", ConfigError),
        ("warehouse.ledger", "LedgerError", InputError),
        ("warehouse.analytics.explain", "ExplainError", InputError),
        ("warehouse.analytics.fragmentation", "FragmentationError", InputError),
        ("warehouse.analytics.queues", "QueueError", InputError),
        ("warehouse.ingest.quarantine", "QuarantineError", InputError),
        ("collector.traces.alibaba", "TraceError", InputError),
        ("collector.nvml", "NvmlError", SourceError),
        ("collector.kubernetes.collector", "KubernetesError", SourceError),
        ("collector.kubernetes.podresources", "PodResourcesError", SourceError),
        ("collector.slurm.collector", "SlurmError", SourceError),
        ("collector.dcgm.promtext", "ScrapeError", SourceError),
    ],
)
def test_each_error_has_its_kind(where: str, name: str, kind: type[GpuledgerError]) -> None:
    assert issubclass(getattr(importlib.import_module(where), name), kind)


def test_input_errors_are_value_errors_and_the_warehouse_keeps_clickhouse_codes() -> None:
    from warehouse.client import WarehouseError

    assert issubclass(InputError, ValueError)  # callers that catch ValueError keep working
    assert not issubclass(ConfigError, ValueError)
    err = WarehouseError("bad SQL", code=62, name="SYNTAX_ERROR")
    assert isinstance(err, GpuledgerError) and (err.code, err.name) == (62, "SYNTAX_ERROR")
    assert not issubclass(WarehouseError, (ConfigError, InputError, SourceError))
