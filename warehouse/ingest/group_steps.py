"""The steps of a group write, and the error that names the one that failed.

:meth:`~warehouse.ingest.writer.Ingestor.write_group` writes a table at a time; when one fails,
:class:`GroupWriteError` says which, and whether the data were at fault, so that the coalescer
can write the group member by member from there (:mod:`warehouse.ingest.coalesce`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from warehouse.client import WarehouseError

#: The writes of a group, in order: a table each, and the re-derivation of the allocations
#: after the job events.
GROUP_STEPS = (
    "node_inventory_log",
    "gpu_inventory_log",
    "gpu_processes",
    "gpu_health",
    "job_events",
    "allocations",
    "gpu_samples",
    "quarantine",
)


class GroupWriteError(WarehouseError):
    """A group write failed at ``step`` (one of :data:`GROUP_STEPS`); the steps before it are
    written. ``bad_input``: the failure is the data's (a value the driver or the engine cannot
    take), not the warehouse's (unreachable, a missing table, out of memory)."""

    def __init__(self, step: str, cause: BaseException):
        ours = isinstance(cause, WarehouseError)
        super().__init__(
            f"writing {step} failed: {cause if ours else f'{type(cause).__name__}: {cause}'}",
            getattr(cause, "code", None),
            getattr(cause, "name", None),
            # anything else the driver or our checks raised: a value they cannot take
            bad_input=cause.bad_input if isinstance(cause, WarehouseError) else True,
        )
        self.step = step


@contextlib.contextmanager
def attributed(step: str) -> Iterator[None]:
    """Raise what fails in ``step`` as a :class:`GroupWriteError` naming it."""
    try:
        yield
    except GroupWriteError:
        raise
    except Exception as exc:
        raise GroupWriteError(step, exc) from exc
