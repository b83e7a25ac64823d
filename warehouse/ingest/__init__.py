"""The one ingest path: records are checked (:mod:`.checks`, :mod:`.sample_checks`,
:mod:`.known_gpus`), written or quarantined with a reason (:mod:`.writer`, :mod:`.quarantine`),
and agents' batches are coalesced into few large inserts (:mod:`.coalesce`, :mod:`.metrics`).
:class:`warehouse.ingest.sink.WarehouseSink` lets a collector write here directly; the HTTP
route of ``gpuledger serve`` only hands batches to the coalescer."""
