-- Energy per hour, GPU and the job label its samples carried, from the 1-minute rollup's
-- energy counter (total energy since driver load, mJ). A minute's energy is the counter's
-- rise since the previous minute's last reading; where the counter went backwards (a driver
-- reload or a node reboot resets it) or there is no previous reading, only the rise within
-- the minute counts. MIG instance rows carry no device-level energy: whole-GPU rows only.
WITH
    per_minute AS (
        SELECT cluster, gpu_uuid, ts AS m, max(job_id) AS holder,
               max(energy_millijoules_max) AS emax, min(energy_millijoules_min) AS emin
        FROM {db:Identifier}.gpu_samples_1m
        WHERE (cluster = {cluster:String} OR {cluster:String} = '') AND mig_instance = ''
          AND ts >= toDateTime({a:DateTime64(3)}) - INTERVAL 1 MINUTE
          AND ts < toDateTime({b:DateTime64(3)})
        GROUP BY cluster, gpu_uuid, m
        HAVING emax IS NOT NULL
    ),
    deltas AS (
        SELECT cluster, gpu_uuid, m, holder,
               lagInFrame(toNullable(emax), 1, NULL) OVER (
                   PARTITION BY cluster, gpu_uuid ORDER BY m
                   ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS prev,
               if(prev IS NULL OR emax < prev, emax - emin, emax - prev) AS mj
        FROM per_minute
    )
SELECT cluster, gpu_uuid, holder AS job_id,
       toDateTime64(toStartOfHour(m), 3, 'UTC') AS hour,
       sum(mj) / 3.6e9 AS energy_kwh
FROM deltas
WHERE m >= toDateTime({a:DateTime64(3)})
GROUP BY cluster, gpu_uuid, job_id, hour
