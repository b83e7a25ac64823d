-- Quarantined rows that `gpuledger quarantine replay` wrote (or found already written), by the
-- id of the quarantine row (sipHash64 of all its columns, see sql/quarantine_pending_rows.sql).
-- The quarantine rows stay, as history; listings and later replays leave out the ones named
-- here, so a row is written once however often replay runs.
CREATE TABLE IF NOT EXISTS ${db}.quarantine_replays${local} ${on_cluster}
(
    replayed_at DateTime64(3, 'UTC'),
    quarantine_id UInt64,
    kind LowCardinality(String),
    batch_id String,
    outcome LowCardinality(String)
)
ENGINE = ${engine:MergeTree}
ORDER BY quarantine_id
SETTINGS non_replicated_deduplication_window = 10000
