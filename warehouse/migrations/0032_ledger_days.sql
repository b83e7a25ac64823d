-- The usage rows of the sealed days (see ledger_seals): per allocation interval and day, what
-- sql/ledger_usage.sql returns for the window [day, day + 1), under the seal that wrote them.
-- Rows of a seal that a later one replaced are never read (readers ask for the seal_id of the
-- latest seal); they stay, skipped by the sorting key, until their month's partition is dropped.
CREATE TABLE IF NOT EXISTS ${db}.ledger_days${local} ${on_cluster}
(
    day Date,
    seal_id UInt64,
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
    end_event LowCardinality(String),
    fraction Float32,
    s DateTime64(3, 'UTC'),
    e DateTime64(3, 'UTC'),
    allocated_gpu_ms Float64,
    used_gpu_hours Nullable(Float64),
    idle_gpu_hours Nullable(Float64)
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(day)
ORDER BY (day, seal_id, cluster, gpu_uuid, mig_instance, job_id, attempt)
SETTINGS non_replicated_deduplication_window = 10000
