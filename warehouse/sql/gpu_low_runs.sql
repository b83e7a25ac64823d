-- One GPU's runs of low minutes over the hours overlapping [lo, hi): [start_ms, end_ms) of
-- consecutive low minutes, one row per run and MIG slice ('' for a whole GPU), uncut. A minute is
-- low as in ledger_minutes_rollup.sql: it has a utilisation sample and every sample stayed under
-- `threshold`. Read from the 1-minute rollup, which holds the same minutes as gpu_minutes_1h:
-- one GPU's rows lie together there, where an hour row of gpu_minutes_1h carries a whole hour's
-- arrays and a granule read for one GPU decodes thousands of others' rows.
SELECT mig_instance, r.1 AS start_ms, r.2 AS end_ms
FROM (
    SELECT mig_instance, arraySort(groupArray(m)) AS ms, arrayDifference(ms) AS gap,
           arrayFilter((x, g, i) -> i = 1 OR g != 60000, ms, gap, arrayEnumerate(ms)) AS starts,
           arrayFilter((x, g) -> g != 60000, ms, arrayPushBack(arrayPopFront(gap), 0)) AS lasts
    FROM (
        SELECT mig_instance, toInt64(toUnixTimestamp(ts)) * 1000 AS m
        FROM {db:Identifier}.gpu_samples_1m
        WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
          AND ts >= toStartOfHour({lo:DateTime64(3, 'UTC')})
          AND ts < toStartOfHour({hi:DateTime64(3, 'UTC')}) + INTERVAL 1 HOUR
          AND toStartOfHour(ts) < {hi:DateTime64(3, 'UTC')}
        GROUP BY mig_instance, ts
        HAVING sum(util_samples) > 0 AND max(util_ratio_max) < {threshold:Float64}
    )
    GROUP BY mig_instance
)
ARRAY JOIN arrayZip(starts, arrayMap(x -> x + 60000, lasts)) AS r
ORDER BY mig_instance, start_ms
