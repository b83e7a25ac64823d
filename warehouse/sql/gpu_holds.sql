-- The allocation intervals of one GPU (all its MIG slices) overlapping [a, b), oldest first,
-- with their ends as stored (NULL: still open); tenant '' = every tenant's, else one tenant's
-- (an org takes in its projects).
SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant,
       toFloat64(fraction) AS fraction, start_ts, end_ts, end_event
FROM {db:Identifier}.allocations FINAL
WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
  AND start_ts < {b:DateTime64(3, 'UTC')}
  AND (end_ts IS NULL OR end_ts > {a:DateTime64(3, 'UTC')})
  AND ({tenant:String} = '' OR tenant = {tenant:String}
       OR startsWith(tenant, concat({tenant:String}, '/')))
ORDER BY start_ts, job_id, attempt, mig_instance
