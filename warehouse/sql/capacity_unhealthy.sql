-- The GPUs (or MIG slices) that are not healthy at `at`: their inventory's latest row at or
-- before `at` says unhealthy or down, or their latest health counters since `since` say the
-- GPU fell off the bus or needs its rows remapped. With each: since when its inventory has
-- not said healthy (not_healthy_since; NULL when it does), the reason the source gave (often
-- "Xid 79: ..."), the Xid in it (reason_xid), the highest Xid of the latest hour since `since`
-- whose samples carried one (xid, xid_hour; from the 1-hour rollup), and the latest counters
-- (gpu_health). Retired GPUs are left out. '' pool or model: all of them.
WITH
    log AS (
        SELECT gpu_uuid, mig_instance, ts, node, gpu_index, pool, gpu_model, health,
               health_reason
        FROM {db:Identifier}.gpu_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
    ),
    unit AS (
        SELECT gpu_uuid, mig_instance, argMax(node, ts) AS node,
               argMax(gpu_index, ts) AS gpu_index, argMax(pool, ts) AS pool,
               argMax(gpu_model, ts) AS gpu_model, argMax(health, ts) AS state,
               argMax(health_reason, ts) AS reason,
               maxIf(ts, health = 'healthy') AS last_healthy_ts
        FROM log
        GROUP BY gpu_uuid, mig_instance
    ),
    run AS (
        SELECT l.gpu_uuid AS gpu_uuid, l.mig_instance AS mig_instance,
               min(l.ts) AS not_healthy_since
        FROM log AS l
        INNER JOIN unit AS u ON u.gpu_uuid = l.gpu_uuid AND u.mig_instance = l.mig_instance
        WHERE u.state != 'healthy' AND l.ts > u.last_healthy_ts
        GROUP BY gpu_uuid, mig_instance
    ),
    counters AS (
        SELECT gpu_uuid, max(ts) AS counters_ts, argMax(gpu_lost, ts) AS gpu_lost,
               argMax(ecc_dbe_volatile, ts) AS ecc_dbe_volatile,
               argMax(remapped_rows_uncorrectable, ts) AS remapped_rows_uncorrectable,
               argMax(remapped_rows_pending, ts) AS remapped_rows_pending,
               argMax(remapped_rows_failure, ts) AS remapped_rows_failure
        FROM {db:Identifier}.gpu_health
        WHERE cluster = {cluster:String} AND ts > {since:DateTime64(3, 'UTC')}
          AND ts <= {at:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid
    ),
    xids AS (
        SELECT gpu_uuid, argMax(xid_max, ts) AS xid, max(ts) AS xid_hour
        FROM {db:Identifier}.gpu_samples_1h
        WHERE cluster = {cluster:String} AND xid_samples > 0
          AND ts >= toStartOfHour({since:DateTime64(3, 'UTC')})
          AND ts <= {at:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid
    )
SELECT u.node AS node, toInt64(u.gpu_index) AS gpu_index, u.gpu_uuid AS gpu_uuid,
       u.mig_instance AS mig_instance, u.pool AS pool, u.gpu_model AS gpu_model,
       u.state AS health, if(u.state = 'healthy', NULL, r.not_healthy_since)
           AS not_healthy_since,
       u.reason AS reason,
       toUInt32OrNull(extract(u.reason, 'Xid (\\d+)')) AS reason_xid,
       x.xid AS xid, if(x.gpu_uuid = '', NULL, toDateTime64(x.xid_hour, 3, 'UTC')) AS xid_hour,
       c.gpu_lost AS gpu_lost, c.ecc_dbe_volatile AS ecc_dbe_volatile,
       c.remapped_rows_uncorrectable AS remapped_rows_uncorrectable,
       c.remapped_rows_pending AS remapped_rows_pending,
       c.remapped_rows_failure AS remapped_rows_failure,
       if(c.gpu_uuid = '', NULL, c.counters_ts) AS counters_ts
FROM unit AS u
LEFT JOIN run AS r ON r.gpu_uuid = u.gpu_uuid AND r.mig_instance = u.mig_instance
LEFT JOIN counters AS c ON c.gpu_uuid = u.gpu_uuid
LEFT JOIN xids AS x ON x.gpu_uuid = u.gpu_uuid
WHERE u.state != 'retired'
  AND (u.state != 'healthy' OR c.gpu_lost OR coalesce(c.remapped_rows_failure, false)
       OR coalesce(c.remapped_rows_pending, false))
  AND ({pool:String} = '' OR u.pool = {pool:String})
  AND ({gpu_model:String} = '' OR u.gpu_model = {gpu_model:String})
ORDER BY node, gpu_index, gpu_uuid, mig_instance
