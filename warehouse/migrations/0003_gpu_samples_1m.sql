-- One row per GPU, job and minute: what the ledger reads instead of raw samples.
-- Sums and counts (not averages) so that rows merge and re-aggregate exactly.
CREATE TABLE IF NOT EXISTS ${db}.gpu_samples_1m${local} ${on_cluster}
(
    ts DateTime('UTC'),
    cluster LowCardinality(String),
    node SimpleAggregateFunction(max, LowCardinality(String)),
    gpu_uuid LowCardinality(String),
    mig_instance LowCardinality(String),
    namespace LowCardinality(String),
    pod String,
    job_id String,
    gpu_model SimpleAggregateFunction(max, LowCardinality(String)),
    samples SimpleAggregateFunction(sum, UInt64),
    util_samples SimpleAggregateFunction(sum, UInt64),
    util_ratio_sum SimpleAggregateFunction(sum, Float64),
    util_ratio_min SimpleAggregateFunction(min, Nullable(Float32)),
    util_ratio_max SimpleAggregateFunction(max, Nullable(Float32)),
    memory_used_bytes_max SimpleAggregateFunction(max, Nullable(UInt64)),
    memory_total_bytes_max SimpleAggregateFunction(max, Nullable(UInt64)),
    power_samples SimpleAggregateFunction(sum, UInt64),
    power_watts_sum SimpleAggregateFunction(sum, Float64),
    energy_millijoules_min SimpleAggregateFunction(min, Nullable(UInt64)),
    energy_millijoules_max SimpleAggregateFunction(max, Nullable(UInt64)),
    temperature_celsius_max SimpleAggregateFunction(max, Nullable(Float32)),
    xid_samples SimpleAggregateFunction(sum, UInt64),
    xid_max SimpleAggregateFunction(max, Nullable(UInt32))
)
ENGINE = ${engine:AggregatingMergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, gpu_uuid, mig_instance, ts, namespace, pod, job_id)
TTL ts + INTERVAL ${rollup_1m_retention_days} DAY
SETTINGS non_replicated_deduplication_window = 10000
