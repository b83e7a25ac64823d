-- Job <-> GPU intervals. An interval opens at `started` (end_ts NULL) and is closed by the job's
-- terminal event; the closed row replaces the open one whatever order they arrive in
-- (version: 0 while open, the end time in ms once closed). fraction: the share of the GPU held;
-- a job whose source names no GPU (a trace, sacct) has one row with gpu_uuid '' and fraction =
-- the number of GPUs it held, so that its GPU-hours still add up.
CREATE TABLE IF NOT EXISTS ${db}.allocations${local} ${on_cluster}
(
    cluster LowCardinality(String),
    pool LowCardinality(String),
    node LowCardinality(String),
    gpu_uuid LowCardinality(String),
    mig_instance LowCardinality(String),
    gpu_model LowCardinality(String),
    job_id String,
    attempt UInt16,
    tenant LowCardinality(String),
    org LowCardinality(String),
    project LowCardinality(String),
    user LowCardinality(String),
    queue LowCardinality(String),
    workload_type LowCardinality(String),
    fraction Float32,
    start_ts DateTime64(3, 'UTC'),
    end_ts Nullable(DateTime64(3, 'UTC')),
    end_event LowCardinality(String),
    end_reason String,
    version UInt64
)
ENGINE = ${engine:ReplacingMergeTree(version)}
ORDER BY (cluster, job_id, attempt, gpu_uuid, mig_instance)
SETTINGS non_replicated_deduplication_window = 10000
