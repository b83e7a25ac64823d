"""The warehouse: the client (:mod:`.client`), the schema as numbered migrations
(:mod:`.migrate`), the one ingest path (:mod:`.ingest`), the ledger (:mod:`.ledger`, the door
consumers use) and the analytics beside it (:mod:`.analytics`)."""
