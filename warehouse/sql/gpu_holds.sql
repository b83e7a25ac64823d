-- The allocation intervals of one GPU (all its MIG slices) overlapping [a, b), oldest first,
-- with their ends as stored (NULL: still open); tenant '' = every tenant's, else one tenant's
-- (an org takes in its projects). Each interval's latest version is taken by argMax over the
-- GPU's rows rather than by FINAL: the table is sorted by job, so FINAL would merge every
-- job's rows to find one GPU's (equal versions are the same interval sent again).
SELECT cluster, latest.1 AS pool, latest.2 AS node, gpu_uuid, mig_instance, latest.3 AS gpu_model,
       job_id, attempt, latest.4 AS tenant, latest.5 AS fraction, latest.6 AS start_ts,
       latest.7 AS end_ts, latest.8 AS end_event
FROM (
    SELECT cluster, gpu_uuid, mig_instance, job_id, attempt,
           argMax((pool, node, gpu_model, tenant, toFloat64(fraction), start_ts, end_ts,
                   end_event), version) AS latest
    FROM {db:Identifier}.allocations
    WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
    GROUP BY cluster, job_id, attempt, gpu_uuid, mig_instance
)
WHERE start_ts < {b:DateTime64(3, 'UTC')}
  AND (end_ts IS NULL OR end_ts > {a:DateTime64(3, 'UTC')})
  AND ({tenant:String} = '' OR tenant = {tenant:String}
       OR startsWith(tenant, concat({tenant:String}, '/')))
ORDER BY start_ts, job_id, attempt, mig_instance
