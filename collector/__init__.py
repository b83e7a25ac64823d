"""Sources: each subpackage reads one kind of source (nvml, dcgm, kubernetes, slurm, traces,
sim) into the typed records of :mod:`collector.records`; a :class:`collector.pipeline.Pipeline`
hands them to a sink, through the agent's :mod:`collector.spool`. Nothing here imports the
warehouse."""
