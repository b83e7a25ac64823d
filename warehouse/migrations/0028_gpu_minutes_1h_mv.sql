-- Maintains gpu_minutes_1h from every insert into gpu_samples_1m (itself maintained from
-- gpu_samples), so both rollups hold the same minutes. Reading the 1-minute rows rather than the
-- raw samples keeps the cost at insert to a sixth (at 10 s sampling).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.gpu_minutes_1h_mv${local} ${on_cluster}
TO ${db}.gpu_minutes_1h${local}
AS SELECT
    toStartOfHour(m) AS ts,
    cluster, gpu_uuid, mig_instance,
    sumMap(([minute], [util_sum], [bitShiftLeft(util_count, 32) + sample_count])) AS minute_util,
    maxMap(([minute], [coalesce(util_hi, toFloat32(0))])) AS minute_max,
    groupBitOrMapState(map(job_id, bitShiftLeft(toUInt64(1), minute))) AS holders,
    min(util_lo) AS util_min,
    max(util_hi) AS util_max,
    sum(util_count) AS util_samples,
    sum(sample_count) AS samples,
    min(job_id) AS holder_min,
    max(job_id) AS holder_max
FROM (
    SELECT ts AS m, toUInt8(toMinute(ts)) AS minute, cluster, gpu_uuid, mig_instance, job_id,
           toFloat64(util_ratio_sum) AS util_sum, toUInt64(util_samples) AS util_count,
           toUInt64(samples) AS sample_count, util_ratio_min AS util_lo,
           util_ratio_max AS util_hi
    FROM ${db}.gpu_samples_1m${local}
)
GROUP BY ts, cluster, gpu_uuid, mig_instance
