"""warehouse.ingest."""
