-- The low minutes of every GPU (or MIG slice) that a job holds at `at` (of one cluster, '' =
-- all; held by one tenant, '' = all, an org taking in its projects), as pieces [start_ms,
-- end_ms) of consecutive low minutes, one row per GPU and hour, from the 1-minute rollup folded
-- by hour (gpu_minutes_1h). A minute is low as in ledger_minutes_rollup.sql: it has a
-- utilisation sample and every sample stayed under `threshold`. last_ms is the end of the
-- hour's latest minute with samples. Minutes from `at` on are left out.
-- Only the hours that can hold the run of low minutes reaching a GPU's latest minute are read:
-- from the latest hour before at's that holds a minute that is not low (a busy sample, or one
-- without utilisation), or from the hour the earliest of its open jobs started.
WITH
    4294967296 AS util_sample,
    toUnixTimestamp64Milli({at:DateTime64(3, 'UTC')}) AS at_ms,
    held AS (
        SELECT cluster, gpu_uuid, mig_instance, toStartOfHour(min(start_ts)) AS from_hour
        FROM {db:Identifier}.allocations FINAL
        WHERE ({cluster:String} = '' OR cluster = {cluster:String}) AND gpu_uuid != ''
          AND start_ts <= {at:DateTime64(3, 'UTC')}
          AND (end_ts IS NULL OR end_ts > {at:DateTime64(3, 'UTC')})
          AND ({tenant:String} = '' OR tenant = {tenant:String}
               OR startsWith(tenant, concat({tenant:String}, '/')))
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    -- an hour's partial rows tell a minute that is not low as well as its merged row does
    -- (a maximum, and counts that only add up), so these are read without FINAL
    marks AS (
        SELECT r.cluster AS cluster, r.gpu_uuid AS gpu_uuid, r.mig_instance AS mig_instance,
               max(r.ts) AS mark
        FROM {db:Identifier}.gpu_minutes_1h AS r
        INNER JOIN held AS g
            ON g.cluster = r.cluster AND g.gpu_uuid = r.gpu_uuid
           AND g.mig_instance = r.mig_instance
        WHERE (r.cluster, r.gpu_uuid, r.mig_instance) IN
                  (SELECT cluster, gpu_uuid, mig_instance FROM held)
          AND r.ts >= (SELECT min(from_hour) FROM held)
          AND r.ts < toStartOfHour({at:DateTime64(3, 'UTC')})
          AND r.ts >= g.from_hour
          AND (r.util_max >= {threshold:Float64} OR r.util_samples < r.samples)
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    since AS (
        SELECT g.cluster AS cluster, g.gpu_uuid AS gpu_uuid, g.mig_instance AS mig_instance,
               greatest(g.from_hour, coalesce(m.mark, g.from_hour)) AS from_hour
        FROM held AS g
        LEFT JOIN marks AS m
            ON m.cluster = g.cluster AND m.gpu_uuid = g.gpu_uuid
           AND m.mig_instance = g.mig_instance
        SETTINGS join_use_nulls = 1
    ),
    hours AS (
        SELECT cluster, gpu_uuid, mig_instance, toInt64(toUnixTimestamp(ts)) * 1000 AS h_ms,
               minute_util.1 AS k, minute_util.3 AS counts, minute_max.2 AS highest
        FROM {db:Identifier}.gpu_minutes_1h FINAL
        WHERE (cluster, gpu_uuid, mig_instance) IN
                  (SELECT cluster, gpu_uuid, mig_instance FROM held)
          AND ts >= (SELECT min(from_hour) FROM held)
          AND ts < {at:DateTime64(3, 'UTC')}
    ),
    low AS (
        SELECT hh.cluster AS cluster, hh.gpu_uuid AS gpu_uuid, hh.mig_instance AS mig_instance,
               hh.h_ms AS h_ms,
               arrayFilter((m, c, y) -> c >= util_sample AND y < {threshold:Float64}
                                        AND h_ms + m * 60000 < at_ms,
                           hh.k, hh.counts, hh.highest) AS lk,
               arrayMax(arrayMap(m -> if(h_ms + m * 60000 < at_ms, h_ms + (m + 1) * 60000, 0),
                                 hh.k)) AS last_ms
        FROM hours AS hh
        INNER JOIN since AS s
            ON s.cluster = hh.cluster AND s.gpu_uuid = hh.gpu_uuid
           AND s.mig_instance = hh.mig_instance
        WHERE hh.h_ms >= toInt64(toUnixTimestamp(s.from_hour)) * 1000
    )
SELECT cluster, gpu_uuid, mig_instance, h_ms,
       CAST(arrayMap((x, y) -> (h_ms + x * 60000, h_ms + (y + 1) * 60000),
                     arrayFilter((m, pm) -> m != pm + 1, lk,
                                 arrayPopBack(arrayPushFront(lk, 254))),
                     arrayFilter((m, nm) -> nm != m + 1, lk,
                                 arrayPopFront(arrayPushBack(lk, 254)))),
            'Array(Tuple(start_ms Int64, end_ms Int64))') AS pieces,
       least(last_ms, at_ms) AS last_ms
FROM low
WHERE last_ms > 0
ORDER BY cluster, gpu_uuid, mig_instance, h_ms
