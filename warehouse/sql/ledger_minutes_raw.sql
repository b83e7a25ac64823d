-- Per GPU (or MIG instance) and every hour overlapping [lo, hi), straight from the raw samples:
-- the same rows as ledger_minutes_rollup.sql (see there), computed without the rollups.
--
-- One pass grouped by GPU and hour: the -Resample combinators keep one bucket per minute of the
-- hour (sums, counts and the highest utilisation), so no sample is sorted or kept in an array.
SELECT cluster, gpu_uuid, mig_instance, h, arraySum(u) / 60 AS used, k, u, whole,
       if(whole, [], arrayFilter((m, c, y) -> c > 0 AND y < {threshold:Float64}, k, uc, mx))
           AS lk
FROM (
    SELECT cluster, gpu_uuid, mig_instance, h,
           arrayFilter((m, c) -> c > 0, range(60), sc) AS k,
           arrayFilter((x, c) -> c > 0, ucs, sc) AS uc,
           arrayFilter((x, c) -> c > 0, arrayMap((s, c) -> if(c > 0, s / c, 0.), sums, ucs), sc)
               AS u,
           arrayFilter((x, c) -> c > 0, arrayMap(x -> coalesce(x, 0), mxs), sc) AS mx,
           length(k) = 60 AND arrayAll((c, s, y) -> c = s AND coalesce(y, 1) < {threshold:Float64},
                                       ucs, sc, mxs) AS whole
    FROM (
        SELECT cluster, gpu_uuid, mig_instance, toDateTime(toStartOfHour(ts), 'UTC') AS h,
               sumResample(0, 60, 1)(toFloat64(util_ratio), toMinute(ts)) AS sums,
               countResample(0, 60, 1)(util_ratio, toMinute(ts)) AS ucs,
               countResample(0, 60, 1)(toMinute(ts)) AS sc,
               maxResample(0, 60, 1)(util_ratio, toMinute(ts)) AS mxs
        FROM {db:Identifier}.gpu_samples
        WHERE (cluster = {cluster:String} OR {cluster:String} = '')
          AND ts >= toStartOfHour({lo:DateTime64(3)})
          AND ts < toStartOfHour({hi:DateTime64(3)} - INTERVAL 1 MILLISECOND) + INTERVAL 1 HOUR
        GROUP BY cluster, gpu_uuid, mig_instance, h
    )
)
