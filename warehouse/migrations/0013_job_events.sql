-- Job lifecycle events from every scheduler (Kubernetes, Kueue, Slurm, traces, simulator).
CREATE TABLE IF NOT EXISTS ${db}.job_events${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC'),
    cluster LowCardinality(String),
    job_id String,
    attempt UInt16,
    event LowCardinality(String),
    name String,
    tenant LowCardinality(String),
    org LowCardinality(String),
    project LowCardinality(String),
    user LowCardinality(String),
    namespace LowCardinality(String),
    pool LowCardinality(String),
    queue LowCardinality(String),
    priority Int32,
    priority_class LowCardinality(String),
    workload_type LowCardinality(String),
    gpu_model LowCardinality(String),
    gpus_requested Float32,
    gpu_fraction Float32,
    node LowCardinality(String),
    gpu_uuids Array(String),
    mig_instances Array(String),
    started_at Nullable(DateTime64(3, 'UTC')),
    reason String,
    source LowCardinality(String)
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, job_id, ts)
SETTINGS non_replicated_deduplication_window = 10000
