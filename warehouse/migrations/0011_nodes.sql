-- The current inventory of nodes: the latest state of each wins.
CREATE TABLE IF NOT EXISTS ${db}.nodes${local} ${on_cluster}
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
ENGINE = ${engine:ReplacingMergeTree(ts)}
ORDER BY (cluster, node)
