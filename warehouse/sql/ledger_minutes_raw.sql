-- Per GPU (or MIG instance) and every hour overlapping [lo, hi), straight from the raw samples:
-- the same rows as ledger_minutes_rollup.sql (see there), computed without the rollups, except
-- that k lists only the minutes with a utilisation sample (the others add nothing to used, and
-- are never low).
--
-- One pass grouped by GPU and hour: the -Resample combinators keep one bucket per minute of the
-- hour (sums, counts and the highest utilisation), so no sample is sorted or kept in an array.
-- The hour is grouped as a plain number (read in the table's order, GPU by GPU, with
-- optimize_aggregation_in_order, which ledger.py sets for this source): a DateTime expression
-- there makes the engine hash every sample instead, several times slower.
SELECT cluster, gpu_uuid, mig_instance, h, arraySum(u) / 60 AS used, k, u, whole,
       if(whole, [], arrayFilter((m, y) -> y < {threshold:Float64}, k, mx)) AS lk
FROM (
    SELECT cluster, gpu_uuid, mig_instance, toDateTime(hn * 3600, 'UTC') AS h,
           arrayFilter((m, c) -> c > 0, range(60), ucs) AS k,
           arrayFilter((x, c) -> c > 0, arrayMap((s, c) -> if(c > 0, s / c, 0.), sums, ucs), ucs)
               AS u,
           arrayFilter((x, c) -> c > 0, arrayMap(x -> coalesce(x, 0), mxs), ucs) AS mx,
           length(k) = 60 AND arrayAll(y -> coalesce(y, 1) < {threshold:Float64}, mxs) AS whole
    FROM (
        SELECT cluster, gpu_uuid, mig_instance, intDiv(toUnixTimestamp64Milli(ts), 3600000) AS hn,
               sumResample(0, 60, 1)(toFloat64(util_ratio), toMinute(ts)) AS sums,
               countResample(0, 60, 1)(util_ratio, toMinute(ts)) AS ucs,
               maxResample(0, 60, 1)(util_ratio, toMinute(ts)) AS mxs
        FROM {db:Identifier}.gpu_samples
        WHERE (cluster = {cluster:String} OR {cluster:String} = '')
          AND ts >= toStartOfHour({lo:DateTime64(3)})
          AND ts < toStartOfHour({hi:DateTime64(3)} - INTERVAL 1 MILLISECOND) + INTERVAL 1 HOUR
        GROUP BY cluster, gpu_uuid, mig_instance, hn
    )
)
