-- Quota-reclaim advice and priority decisions given to the scheduler, with their status.
CREATE TABLE IF NOT EXISTS ${db}.advice${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC'),
    advice_id String,
    kind LowCardinality(String),
    cluster LowCardinality(String),
    pool LowCardinality(String),
    gpu_model LowCardinality(String),
    from_tenant LowCardinality(String),
    to_tenant LowCardinality(String),
    gpus Float64,
    job_ids Array(String),
    reason String,
    payload String,
    status LowCardinality(String)
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (ts, advice_id)
