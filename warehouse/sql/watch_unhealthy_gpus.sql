-- The GPUs of {cluster} that show a sign of bad health at `at`, one row per physical GPU with
-- every sign and since when it has shown:
-- - inventory: its latest row at or before `at` says unhealthy or down (health_since: the first
--   row of that run of the same state; the reason, often "Xid 79: ...", as the source gave it);
-- - counters (gpu_health): its latest row, no older than `fresh_s`, says the GPU is lost, has
--   double-bit ECC errors since the driver loaded, or needs (or failed) a row remap
--   (counters_since: the first such row after the latest row without one, within `lookback_s`);
-- - Xid: a minute of the 1-minute rollup within the last `xid_window_s` whose highest Xid is
--   one of `xids` (every Xid when `all_xids`); the latest such Xid and its first and last minute.
-- With each, the jobs holding it at `at` and their tenants. Retired GPUs are left out.
WITH
    log AS (
        SELECT gpu_uuid, ts, node, pool, gpu_model, health, health_reason
        FROM {db:Identifier}.gpu_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
    ),
    unit AS (
        SELECT gpu_uuid, argMax(node, ts) AS node, argMax(pool, ts) AS pool,
               argMax(gpu_model, ts) AS gpu_model, argMax(health, ts) AS state,
               argMax(health_reason, ts) AS reason
        FROM log
        GROUP BY gpu_uuid
    ),
    run AS (
        SELECT l.gpu_uuid AS gpu_uuid, maxIf(l.ts, l.health != u.state) AS changed_ts
        FROM log AS l
        INNER JOIN unit AS u ON u.gpu_uuid = l.gpu_uuid
        GROUP BY gpu_uuid
    ),
    health_run AS (
        SELECT l.gpu_uuid AS gpu_uuid, min(l.ts) AS health_since
        FROM log AS l
        INNER JOIN run AS r ON r.gpu_uuid = l.gpu_uuid
        WHERE l.ts > r.changed_ts
        GROUP BY gpu_uuid
    ),
    -- the GPUs whose latest counters (no older than fresh_s) are bad: a few, read first, so
    -- that only their rows are traced back over the lookback
    counters AS (
        SELECT gpu_uuid, max(ts) AS counters_ts,
               argMax(tuple(gpu_lost OR coalesce(ecc_dbe_volatile, 0) > 0
                                OR coalesce(remapped_rows_pending, false)
                                OR coalesce(remapped_rows_failure, false),
                            gpu_lost, ecc_dbe_volatile, remapped_rows_pending,
                            remapped_rows_failure), ts) AS latest
        FROM {db:Identifier}.gpu_health
        WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
          AND ts > {at:DateTime64(3, 'UTC')} - toIntervalSecond({fresh_s:UInt32})
        GROUP BY gpu_uuid
        HAVING latest.1
    ),
    counter_rows AS (
        SELECT gpu_uuid, ts,
               gpu_lost OR coalesce(ecc_dbe_volatile, 0) > 0
                   OR coalesce(remapped_rows_pending, false)
                   OR coalesce(remapped_rows_failure, false) AS bad
        FROM {db:Identifier}.gpu_health
        WHERE cluster = {cluster:String} AND gpu_uuid IN (SELECT gpu_uuid FROM counters)
          AND ts <= {at:DateTime64(3, 'UTC')}
          AND ts > {at:DateTime64(3, 'UTC')} - toIntervalSecond({lookback_s:UInt32})
    ),
    good AS (
        SELECT gpu_uuid, maxIf(ts, NOT bad) AS good_ts FROM counter_rows GROUP BY gpu_uuid
    ),
    counters_run AS (
        SELECT r.gpu_uuid AS gpu_uuid, min(r.ts) AS counters_since
        FROM counter_rows AS r
        INNER JOIN good AS g ON g.gpu_uuid = r.gpu_uuid
        WHERE r.ts > g.good_ts
        GROUP BY gpu_uuid
    ),
    xids AS (
        SELECT gpu_uuid, argMax(xid_max, ts) AS xid, min(ts) AS xid_first, max(ts) AS xid_last
        FROM {db:Identifier}.gpu_samples_1m
        WHERE cluster = {cluster:String} AND xid_max IS NOT NULL
          AND ts >= toStartOfMinute({at:DateTime64(3, 'UTC')}
                                    - toIntervalSecond({xid_window_s:UInt32}))
          AND ts <= {at:DateTime64(3, 'UTC')}
          AND ({all_xids:Bool} OR has({xids:Array(UInt32)}, assumeNotNull(xid_max)))
        GROUP BY gpu_uuid
    ),
    signs AS (
        SELECT gpu_uuid FROM unit WHERE state IN ('unhealthy', 'down')
        UNION DISTINCT SELECT gpu_uuid FROM counters
        UNION DISTINCT SELECT gpu_uuid FROM xids
    ),
    holders AS (
        SELECT gpu_uuid, groupUniqArray(job_id) AS job_ids, groupUniqArray(tenant) AS tenants
        FROM {db:Identifier}.allocations FINAL
        WHERE cluster = {cluster:String} AND gpu_uuid IN (SELECT gpu_uuid FROM signs)
          AND start_ts <= {at:DateTime64(3, 'UTC')}
          AND (end_ts IS NULL OR end_ts > {at:DateTime64(3, 'UTC')})
        GROUP BY gpu_uuid
    )
SELECT s.gpu_uuid AS gpu_uuid, u.node AS node, u.pool AS pool, u.gpu_model AS gpu_model,
       u.state AS health, u.reason AS health_reason,
       if(u.state IN ('unhealthy', 'down'), h.health_since, NULL) AS health_since,
       c.latest.2 AS gpu_lost, c.latest.3 AS ecc_dbe_volatile,
       c.latest.4 AS remapped_rows_pending, c.latest.5 AS remapped_rows_failure,
       cr.counters_since AS counters_since,
       x.xid AS xid, toDateTime64(x.xid_first, 3, 'UTC') AS xid_first,
       toDateTime64(x.xid_last, 3, 'UTC') AS xid_last,
       arraySort(coalesce(j.job_ids, [])) AS job_ids,
       arraySort(coalesce(j.tenants, [])) AS tenants
FROM signs AS s
LEFT JOIN unit AS u ON u.gpu_uuid = s.gpu_uuid
LEFT JOIN health_run AS h ON h.gpu_uuid = s.gpu_uuid
LEFT JOIN counters AS c ON c.gpu_uuid = s.gpu_uuid
LEFT JOIN counters_run AS cr ON cr.gpu_uuid = s.gpu_uuid
LEFT JOIN xids AS x ON x.gpu_uuid = s.gpu_uuid
LEFT JOIN holders AS j ON j.gpu_uuid = s.gpu_uuid
WHERE coalesce(u.state, '') != 'retired'
ORDER BY node, gpu_uuid
SETTINGS join_use_nulls = 1
