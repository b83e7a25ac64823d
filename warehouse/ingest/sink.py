"""The sink that writes a collector's batches straight into the warehouse (embedded or a
server DSN), for an agent or collector that runs without a ``gpuledger serve`` in between."""

from __future__ import annotations

from collector.pipeline import SinkUnavailable
from collector.records import Batch
from warehouse.client import WarehouseError
from warehouse.ingest.writer import Ingestor


class WarehouseSink:
    """Writes each batch through an :class:`Ingestor`; a warehouse that does not answer makes
    the batch wait in the agent's spool (:class:`SinkUnavailable`)."""

    def __init__(self, ingestor: Ingestor):
        self.ingestor = ingestor

    def send(self, batch: Batch, batch_id: str) -> None:
        try:
            self.ingestor.write(batch, batch_id=batch_id)
        except WarehouseError as exc:
            raise SinkUnavailable(str(exc)) from exc
