-- Rejected input, kept with the reason: nothing a source sends is dropped silently.
CREATE TABLE IF NOT EXISTS ${db}.quarantine${local} ${on_cluster}
(
    received_at DateTime64(3, 'UTC'),
    source LowCardinality(String),
    kind LowCardinality(String),
    batch_id String,
    field LowCardinality(String),
    value String,
    reason String,
    payload String
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(received_at)
ORDER BY (kind, received_at)
SETTINGS non_replicated_deduplication_window = 10000
