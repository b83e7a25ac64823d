-- Per day d (days since 1970-01-01, UTC) of {dns}, with the last sealed instant of {lasts} at
-- the same place: a fingerprint of everything the stranded capacity at the hours [d, last] is
-- computed from (sql/frag_free_units.sql and sql/frag_task_mix.sql): the GPU and node inventory
-- rows up to last (the latest row at or before an instant decides its state), the placed
-- allocations open at some instant of [d, last] with their end clipped to last + 1 ms (a job
-- ending later leaves it as it was), and the job events of the task mix whose window reaches
-- an instant of [d, last]. A sum of hashes: any row added, removed or changed changes it.
WITH
    toInt64(86400000) AS day_ms,
    spans AS (
        SELECT toInt64(p.1) AS dn, p.2 AS last,
               fromUnixTimestamp64Milli(toInt64(p.1) * day_ms, 'UTC') AS d
        FROM (SELECT arrayJoin(arrayZip({dns:Array(Int64)},
                                        {lasts:Array(DateTime64(3, 'UTC'))})) AS p)
    )
SELECT dn, sum(h) AS fp
FROM (
    SELECT s.dn AS dn,
           cityHash64('gpu', g.ts, g.pool, g.node, g.gpu_uuid, g.mig_instance, g.gpu_model,
                      g.capacity_fraction, g.health) AS h
    FROM {db:Identifier}.gpu_inventory_log AS g CROSS JOIN spans AS s
    WHERE g.cluster = {cluster:String} AND g.ts <= s.last
    UNION ALL
    SELECT s.dn AS dn, cityHash64('node', l.ts, l.node, l.state) AS h
    FROM {db:Identifier}.node_inventory_log AS l CROSS JOIN spans AS s
    WHERE l.cluster = {cluster:String} AND l.ts <= s.last
    UNION ALL
    SELECT s.dn AS dn,
           cityHash64('alloc', a.job_id, a.attempt, a.gpu_uuid, a.mig_instance, a.tenant,
                      a.fraction, a.start_ts,
                      least(coalesce(a.end_ts, s.last + toIntervalMillisecond(1)),
                            s.last + toIntervalMillisecond(1))) AS h
    FROM (
        SELECT job_id, attempt, gpu_uuid, mig_instance, tenant, fraction, start_ts, end_ts,
               arrayJoin(range(intDiv(toUnixTimestamp64Milli(start_ts), day_ms),
                               intDiv(coalesce(toUnixTimestamp64Milli(end_ts),
                                               {until_ms:Int64}), day_ms) + 1)) AS dn
        FROM {db:Identifier}.allocations FINAL
        WHERE cluster = {cluster:String} AND gpu_uuid != ''
          AND start_ts <= fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')
          AND coalesce(end_ts, fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC'))
              > fromUnixTimestamp64Milli({since_ms:Int64}, 'UTC')
    ) AS a
    INNER JOIN spans AS s ON s.dn = a.dn
    WHERE a.start_ts <= s.last AND (a.end_ts IS NULL OR a.end_ts > s.d)
    UNION ALL
    SELECT s.dn AS dn,
           cityHash64('event', e.ts, e.job_id, e.attempt, e.gpu_model, e.gpus_requested,
                      e.gpu_fraction, e.gpu_uuids) AS h
    FROM (
        SELECT ts, job_id, attempt, gpu_model, gpus_requested, gpu_fraction, gpu_uuids,
               arrayJoin(range(intDiv(toUnixTimestamp64Milli(ts), day_ms),
                               intDiv(toUnixTimestamp64Milli(ts) + {window_ms:Int64}, day_ms)
                                   + 1)) AS dn
        FROM {db:Identifier}.job_events
        WHERE cluster = {cluster:String} AND event = {event:String}
          AND (gpus_requested > 0 OR notEmpty(gpu_uuids))
          AND ts <= fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')
          AND ts > fromUnixTimestamp64Milli({since_ms:Int64} - {window_ms:Int64}, 'UTC')
    ) AS e
    INNER JOIN spans AS s ON s.dn = e.dn
    WHERE e.ts <= s.last AND e.ts > s.d - toIntervalMillisecond({window_ms:Int64})
)
GROUP BY dn
ORDER BY dn
