-- The advice in force at `at`: each advice's latest row at or before `at` whose status is not
-- one of `done` (applied, rejected, superseded...), of one cluster ('' = all) and touching one
-- tenant ('' = all; either side, an org holding its org/project keys), newest first.
SELECT advice_id, argMax(kind, ts) AS last_kind, min(ts) AS first_ts, max(ts) AS last_ts,
       argMax(cluster, ts) AS last_cluster, argMax(pool, ts) AS last_pool,
       argMax(gpu_model, ts) AS last_gpu_model, argMax(from_tenant, ts) AS last_from_tenant,
       argMax(to_tenant, ts) AS last_to_tenant, argMax(gpus, ts) AS last_gpus,
       argMax(job_ids, ts) AS last_job_ids, argMax(reason, ts) AS last_reason,
       argMax(payload, ts) AS last_payload, argMax(status, ts) AS last_status
FROM {db:Identifier}.advice
WHERE ts <= {at:DateTime64(3, 'UTC')}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
GROUP BY advice_id
HAVING NOT has({done:Array(String)}, last_status)
   AND ({tenant:String} = ''
        OR last_from_tenant = {tenant:String}
        OR startsWith(last_from_tenant, concat({tenant:String}, '/'))
        OR last_to_tenant = {tenant:String}
        OR startsWith(last_to_tenant, concat({tenant:String}, '/')))
ORDER BY last_ts DESC, advice_id
LIMIT {limit:UInt32}
