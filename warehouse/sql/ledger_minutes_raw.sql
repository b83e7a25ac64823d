-- Per GPU (or MIG instance) and every hour overlapping [lo, hi), straight from the raw samples:
-- the same rows as ledger_minutes_rollup.sql (see there), computed without the rollups, except
-- that k lists only the minutes with a utilisation sample (the others add nothing to used, are
-- never low, and are not measured: k is mk), and that an hour whose samples carry no utilisation has no row (it would
-- add nothing either).
--
-- One pass grouped by GPU and day, with one bucket per minute of the day (sumResample), so no
-- sample is sorted or kept in an array; each day's 1,440 buckets are then cut into its hours.
-- A bucket packs three sums into one number, since one aggregate is cheaper than three: each
-- sample with a utilisation adds its ratio (0-1, checked at ingest) + util_sample (2^12) +
-- high_sample (2^24) if it is at or over {threshold}, so that a bucket x holds
--   the utilisation sum         x mod 2^12,
--   the utilisation samples     floor(x / 2^12) mod 2^12,
--   the samples not low         floor(x / 2^24) (x < high_sample: every sample was low),
-- exact for up to 4,095 samples a minute (68 Hz); the sum is rounded at 2^-26 of its magnitude
-- (about 1e-8, against the 6e-8 of a float32 sample). Samples without utilisation add nothing.
-- Grouping by day rather than by hour makes fewer groups (the engine pays per group); the
-- bucket key is the millisecond of the day, which sumResample divides into minutes itself.
-- The day and the millisecond are plain numbers from the millisecond timestamp, so the engine
-- groups in the table's order, GPU by GPU, with optimize_aggregation_in_order (set by
-- warehouse/ledger/usage.py for this source), where a DateTime would make it hash every sample.
-- Per hour, the array functions with a lambda run only where they change something (an hour
-- with a minute without samples, an hour with some low minutes), the others through if()'s
-- short-circuit. The measurements behind these choices are in benchmarks/RESULTS.md.
WITH 4096 AS util_sample, 16777216 AS high_sample
SELECT cluster, gpu_uuid, mig_instance, h, arraySum(u) / 60 AS used, k, u, k AS mk, whole,
       if(whole OR arrayMin(xs) >= high_sample, [], arrayFilter((m, x) -> x < high_sample, k, xs))
           AS lk
FROM (
    SELECT cluster, gpu_uuid, mig_instance, toDateTime((dn * 24 + hour_of_day) * 3600, 'UTC') AS h,
           countEqual(buckets, 0) = 0 AS full,
           if(full, range(60), arrayFilter((m, x) -> x > 0, range(60), buckets)) AS k,
           if(full, buckets, arrayFilter(x -> x > 0, buckets)) AS xs,
           arrayMap(x -> (x - util_sample * floor(x / util_sample))
                        / (floor(x / util_sample) % 4096), xs) AS u,
           full AND arrayMax(xs) < high_sample AS whole
    FROM (
        SELECT cluster, gpu_uuid, mig_instance, intDiv(toUnixTimestamp64Milli(ts), 86400000) AS dn,
               sumResample(0, 86400000, 60000)(
                   toFloat64(util_ratio) + util_sample
                   + high_sample * (util_ratio >= {threshold:Float64}),
                   toUInt32(toUnixTimestamp64Milli(ts) % 86400000)) AS minutes
        FROM {db:Identifier}.gpu_samples
        WHERE (cluster = {cluster:String} OR {cluster:String} = '')
          AND ts >= toStartOfHour({lo:DateTime64(3)})
          AND ts < toStartOfHour({hi:DateTime64(3)} - INTERVAL 1 MILLISECOND) + INTERVAL 1 HOUR
        GROUP BY cluster, gpu_uuid, mig_instance, dn
    )
    ARRAY JOIN arraySplit((x, f) -> f, minutes, arrayMap(i -> i % 60 = 0, range(1440)))
                   AS buckets,
               range(24) AS hour_of_day
    WHERE arraySum(buckets) > 0
)
