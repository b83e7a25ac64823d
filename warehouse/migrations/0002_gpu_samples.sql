-- Raw per-GPU (or per-MIG-instance) samples, as every source reports them.
-- Ordered for per-GPU time scans; one partition per day; dropped after the raw retention.
-- Nullable fields are the ones a GPU or a source may not support (NULL, never a fake 0).
CREATE TABLE IF NOT EXISTS ${db}.gpu_samples${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    node LowCardinality(String),
    gpu_uuid LowCardinality(String),
    gpu_index UInt16,
    mig_instance LowCardinality(String),
    mig_profile LowCardinality(String),
    vendor LowCardinality(String),
    gpu_model LowCardinality(String),
    gpu_util_ratio Nullable(Float32),
    gr_engine_active_ratio Nullable(Float32),
    mem_util_ratio Nullable(Float32),
    -- The utilisation the ledger uses: graphics-engine activity where the source has it.
    util_ratio Nullable(Float32) MATERIALIZED coalesce(gr_engine_active_ratio, gpu_util_ratio),
    memory_used_bytes Nullable(UInt64),
    memory_total_bytes Nullable(UInt64),
    power_watts Nullable(Float32),
    energy_millijoules Nullable(UInt64),
    temperature_celsius Nullable(Float32),
    sm_clock_mhz Nullable(UInt32),
    xid Nullable(UInt32),
    pod String,
    namespace LowCardinality(String),
    container LowCardinality(String),
    job_id String,
    source LowCardinality(String)
)
ENGINE = ${engine:MergeTree}
PARTITION BY toDate(ts)
ORDER BY (cluster, gpu_uuid, mig_instance, ts)
TTL toDateTime(ts) + INTERVAL ${raw_retention_days} DAY
SETTINGS non_replicated_deduplication_window = 10000
