-- Since when each GPU (or MIG slice) of {cluster} has been free of jobs at `at`: the later of
-- the end of its latest allocation (an open one counts as `at`) and the start of its current
-- run of healthy inventory rows (its first row when it never was anything else). A GPU free
-- since `at` is held now.
WITH
    log AS (
        SELECT gpu_uuid, mig_instance, ts, health
        FROM {db:Identifier}.gpu_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
    ),
    bad AS (
        SELECT gpu_uuid, mig_instance, maxIf(ts, health != 'healthy') AS bad_ts
        FROM log
        GROUP BY gpu_uuid, mig_instance
    ),
    usable AS (
        SELECT l.gpu_uuid AS gpu_uuid, l.mig_instance AS mig_instance,
               min(l.ts) AS usable_since
        FROM log AS l
        INNER JOIN bad AS b ON b.gpu_uuid = l.gpu_uuid AND b.mig_instance = l.mig_instance
        WHERE l.ts > b.bad_ts
        GROUP BY gpu_uuid, mig_instance
    ),
    ends AS (
        SELECT gpu_uuid, mig_instance,
               max(least(coalesce(end_ts, {at:DateTime64(3, 'UTC')}),
                         {at:DateTime64(3, 'UTC')})) AS last_end
        FROM {db:Identifier}.allocations FINAL
        WHERE cluster = {cluster:String} AND gpu_uuid != ''
          AND start_ts <= {at:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid, mig_instance
    )
SELECT u.gpu_uuid AS gpu_uuid, u.mig_instance AS mig_instance,
       greatest(u.usable_since, coalesce(e.last_end, u.usable_since)) AS free_since
FROM usable AS u
LEFT JOIN ends AS e ON e.gpu_uuid = u.gpu_uuid AND e.mig_instance = u.mig_instance
SETTINGS join_use_nulls = 1
