-- Compute processes on each GPU (or MIG instance) at each poll, with their owner as the node's
-- cgroups tell it: who used which GPU's memory and SMs, per process, pod or Slurm job.
-- Ordered for per-GPU time scans; one partition per day; dropped after the raw retention.
-- Nullable fields are the ones a driver may not report (NULL, never a fake 0).
CREATE TABLE IF NOT EXISTS ${db}.gpu_processes${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    node LowCardinality(String),
    gpu_uuid LowCardinality(String),
    mig_instance LowCardinality(String),
    pid UInt32,
    used_memory_bytes Nullable(UInt64),
    sm_util_ratio Nullable(Float32),
    pod_uid String,
    container_id String,
    slurm_job_id String
)
ENGINE = ${engine:MergeTree}
PARTITION BY toDate(ts)
ORDER BY (cluster, gpu_uuid, mig_instance, ts, pid)
TTL toDateTime(ts) + INTERVAL ${raw_retention_days} DAY
SETTINGS non_replicated_deduplication_window = 10000
