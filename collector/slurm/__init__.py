"""Slurm: job events from ``sacct`` (:mod:`.collector`) and the field parsers and prolog
GPU-to-job mapping files (:mod:`.parse`). The source is
:class:`collector.slurm.collector.SlurmCollector`."""
