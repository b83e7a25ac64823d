"""The root of gpuledger's errors, below every room so that each can raise them.

    GpuledgerError                      anything gpuledger raises on purpose
    ├── ConfigError                     a setting is unknown or wrong (gpuledger.settings)
    ├── InputError (also a ValueError)  a request or data that cannot be answered as given
    ├── SourceError                     a data source (NVML, DCGM, Kubernetes, Slurm) failed
    └── WarehouseError                  in warehouse.client: ClickHouse's code and name kept

Every error class of collector/, warehouse/ and gpuledger/ derives from one of these, but for
a few exceptions that only signal between two pieces of code and never reach a user (such as
collector.pipeline's SinkUnavailable); tests/test_errors.py keeps the list. The message of
each is one sentence that says what is wrong and what to do: the command line prints it as
it is (``gpuledger: <message>``), exits 2 for a ConfigError or an InputError and 1 for any
other, and shows the traceback only with ``--debug``. Any other exception is a bug.
"""

from __future__ import annotations

__all__ = ["ConfigError", "GpuledgerError", "InputError", "SourceError"]


class GpuledgerError(Exception):
    """Something gpuledger refuses or cannot do; the message says what and what to do."""


class ConfigError(GpuledgerError):
    """A setting (file, environment variable, flag) is unknown or has a bad value."""


class InputError(GpuledgerError, ValueError):
    """A user's request or data that cannot be answered or accepted as given: a bad flag
    value, an empty window, an unknown job, a trace file without the expected columns."""


class SourceError(GpuledgerError):
    """A data source outside gpuledger failed or cannot be reached: the NVML library, a
    dcgm-exporter, the Kubernetes API server or the kubelet, Slurm's sacct."""
