-- One row per GPU (or MIG instance) and hour holding that hour's minutes, for the ledger: the
-- same per-minute figures as gpu_samples_1m (from which it is filled), folded into one row per
-- hour so that a month of a large fleet is read as 60x fewer rows. Per minute of the hour (key
-- 0-59): the sum of the utilisation ratios and (util_samples << 32 | samples); the highest
-- utilisation ratio (0 where a minute has none); per job label, a bitmap of the minutes whose
-- samples carried it. Per hour: the lowest and highest utilisation ratio, the sample counts and
-- the least and greatest label, so that most hours are judged without their minutes. Every
-- column merges exactly (sum, min, max, bitwise or), so rows re-aggregate to the same minutes
-- however the inserts were split.
CREATE TABLE IF NOT EXISTS ${db}.gpu_minutes_1h${local} ${on_cluster}
(
    ts DateTime('UTC'),
    cluster LowCardinality(String),
    gpu_uuid LowCardinality(String),
    mig_instance LowCardinality(String),
    minute_util SimpleAggregateFunction(sumMap, Tuple(Array(UInt8), Array(Float64), Array(UInt64))),
    minute_max SimpleAggregateFunction(maxMap, Tuple(Array(UInt8), Array(Float32))),
    holders AggregateFunction(groupBitOrMap, Map(String, UInt64)),
    util_min SimpleAggregateFunction(min, Nullable(Float32)),
    util_max SimpleAggregateFunction(max, Nullable(Float32)),
    util_samples SimpleAggregateFunction(sum, UInt64),
    samples SimpleAggregateFunction(sum, UInt64),
    holder_min SimpleAggregateFunction(min, String),
    holder_max SimpleAggregateFunction(max, String)
)
ENGINE = ${engine:AggregatingMergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, gpu_uuid, mig_instance, ts)
TTL ts + INTERVAL ${rollup_1m_retention_days} DAY
SETTINGS non_replicated_deduplication_window = 10000
