-- Per GPU (or MIG instance) and every hour overlapping [lo, hi), straight from the raw samples:
-- the same rows as ledger_minutes_rollup.sql (see there), computed without the rollups.
--
-- One pass in the table's order, grouped by GPU and hour: each sample is packed into one number
-- (minute of the hour, whether it has a utilisation, the utilisation's bits), and the job labels
-- are kept only where they may change: at each block's first row and wherever the label, or the
-- GPU or minute, differs from the previous row of the block (`neighbor` sees one block; as every
-- block start is kept, nothing depends on how rows are cut into blocks). Every minute thus keeps
-- each label its samples carried. Per-minute sums and counts then come from running sums over
-- each hour's sorted samples.
SELECT cluster, gpu_uuid, mig_instance, h, used, k, u, whole,
       if(whole OR NOT low_seen, [], arrayFilter((m, y) -> y, k, low)) AS lk,
       if(whole OR NOT low_seen, [], arrayMap(l -> toUInt8(indexOf(hl, l)),
                                              arrayFilter((l, y) -> y, holder, low))) AS lr,
       hl
FROM (
    SELECT cluster, gpu_uuid, mig_instance, h, k, u, low, holder,
           arraySum(u) / 60 AS used, arrayExists(y -> y, low) AS low_seen,
           if(low_seen, arraySort(arrayDistinct(holder)), []) AS hl,
           low_seen AND length(k) = 60 AND arrayAll(y -> y, low) AND length(hl) = 1 AS whole
    FROM (
        SELECT cluster, gpu_uuid, mig_instance, h,
               arraySort(p) AS ps,
               arrayMap(v -> toUInt8(bitShiftRight(v, 33)), ps) AS mi,
               arrayMap((a, b) -> a != b, mi, arrayPopFront(arrayPushBack(mi, 255))) AS last,
               arrayMap(v -> bitAnd(bitShiftRight(v, 32), 1), ps) AS has,
               arrayMap(v -> toFloat64(reinterpretAsFloat32(toUInt32(bitAnd(v, 4294967295)))),
                        ps) AS ratio,
               arrayFilter((m, l) -> l, mi, last) AS k,
               arrayPopFront(arrayDifference(arrayPushFront(
                   arrayFilter((c, l) -> l, arrayCumSum(ratio), last), 0.))) AS sums,
               arrayPopFront(arrayDifference(arrayPushFront(
                   arrayFilter((c, l) -> l, arrayCumSum(has), last), 0))) AS counts,
               arrayMap((s, c) -> if(c > 0, s / c, 0.), sums, counts) AS u,
               if(highs_all = utils_all, arrayWithConstant(length(k), 0),
                  arrayMap((c, hi) -> c > 0 AND hi = 0, counts,
                           arrayPopFront(arrayDifference(arrayPushFront(arrayFilter((c, l) -> l,
                               arrayCumSum(arrayMap((y, q) -> y AND q >= {threshold:Float64},
                                                    has, ratio)), last), 0)))))
                   AS low,
               -- the greatest label each minute carried: the last of its (minute, label) pairs
               -- (one per minute: arrays of different sizes would make the query fail)
               arraySort(labels) AS ls,
               arrayFilter((t, l) -> l, ls.2, arrayMap((a, b) -> a.1 != b.1, ls,
                           arrayPopFront(arrayPushBack(ls, (toUInt8(255), ''))))) AS holder
        FROM (
            SELECT cluster, gpu_uuid, mig_instance, toDateTime(toStartOfHour(ts), 'UTC') AS h,
                   groupArray(bitShiftLeft(toUInt64(toMinute(ts)), 33)
                              + if(util_ratio IS NULL, 0, 4294967296
                                   + reinterpretAsUInt32(assumeNotNull(util_ratio)))) AS p,
                   count(util_ratio) AS utils_all,
                   countIf(util_ratio >= {threshold:Float64}) AS highs_all,
                   groupArrayIf((toUInt8(toMinute(ts)), job_id),
                                greatest(rowNumberInBlock() = 0, job_id != neighbor(job_id, -1),
                                         mk != neighbor(mk, -1))) AS labels
            FROM (
                SELECT ts, cluster, gpu_uuid, mig_instance, util_ratio, job_id,
                       cityHash64(gpu_uuid) + cityHash64(mig_instance) * 3
                       + cityHash64(cluster) * 5 + intDiv(toUInt64(toUnixTimestamp(ts)), 60) AS mk
                FROM {db:Identifier}.gpu_samples
                WHERE (cluster = {cluster:String} OR {cluster:String} = '')
                  AND ts >= toStartOfHour({lo:DateTime64(3)})
                  AND ts < toStartOfHour({hi:DateTime64(3)} - INTERVAL 1 MILLISECOND)
                           + INTERVAL 1 HOUR
            )
            GROUP BY cluster, gpu_uuid, mig_instance, h
        )
    )
)
