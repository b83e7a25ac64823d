-- Every GPU's low minutes of one cluster over the hours overlapping [lo, hi), as pieces
-- [start_ms, end_ms) of consecutive low minutes, one row per GPU (or MIG slice) and hour, from
-- the 1-minute rollup folded by hour (gpu_minutes_1h). A minute is low as in
-- ledger_minutes_rollup.sql: it has a utilisation sample and every sample stayed under
-- `threshold` (gpu_low_runs.sql finds the same minutes for one GPU).
WITH 4294967296 AS util_sample
SELECT gpu_uuid, mig_instance, h_ms,
       CAST(arrayMap((x, y) -> (h_ms + x * 60000, h_ms + (y + 1) * 60000),
                     arrayFilter((m, pm) -> m != pm + 1, lk,
                                 arrayPopBack(arrayPushFront(lk, 254))),
                     arrayFilter((m, nm) -> nm != m + 1, lk,
                                 arrayPopFront(arrayPushBack(lk, 254)))),
            'Array(Tuple(start_ms Int64, end_ms Int64))') AS pieces
FROM (
    SELECT gpu_uuid, mig_instance, toInt64(toUnixTimestamp(ts)) * 1000 AS h_ms,
           arrayFilter((m, c, y) -> c >= util_sample AND y < {threshold:Float64},
                       minute_util.1, minute_util.3, minute_max.2) AS lk
    FROM {db:Identifier}.gpu_minutes_1h FINAL
    WHERE cluster = {cluster:String}
      AND ts >= toStartOfHour({lo:DateTime64(3, 'UTC')}) AND ts < {hi:DateTime64(3, 'UTC')}
)
WHERE notEmpty(lk)
ORDER BY gpu_uuid, mig_instance, h_ms
