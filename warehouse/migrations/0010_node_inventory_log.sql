-- Every reported state of every node, kept as history.
CREATE TABLE IF NOT EXISTS ${db}.node_inventory_log${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC'),
    cluster LowCardinality(String),
    pool LowCardinality(String),
    node LowCardinality(String),
    vendor LowCardinality(String),
    gpu_model LowCardinality(String),
    gpu_count UInt16,
    state LowCardinality(String),
    state_reason String,
    cpu_milli Nullable(UInt32),
    memory_bytes Nullable(UInt64),
    source LowCardinality(String)
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, node, ts)
SETTINGS non_replicated_deduplication_window = 10000
