-- The alerts open at `at`: each alert's latest row at or before `at` whose state is not one of
-- `closed` (a "resolved" row closes it), of one cluster ('' = all) and of one tenant's rows
-- ('' = all; an org holds its org/project keys), the most recently changed first.
SELECT alert_id, argMax(rule, ts) AS last_rule, argMax(severity, ts) AS last_severity,
       argMax(state, ts) AS last_state, min(ts) AS first_ts, max(ts) AS last_ts,
       argMax(cluster, ts) AS last_cluster, argMax(node, ts) AS last_node,
       argMax(gpu_uuid, ts) AS last_gpu_uuid, argMax(job_id, ts) AS last_job_id,
       argMax(tenant, ts) AS last_tenant, argMax(value, ts) AS last_value,
       argMax(threshold, ts) AS last_threshold, argMax(message, ts) AS last_message
FROM {db:Identifier}.alerts
WHERE ts <= {at:DateTime64(3, 'UTC')}
  AND ({cluster:String} = '' OR cluster = {cluster:String})
GROUP BY alert_id
HAVING NOT has({closed:Array(String)}, last_state)
   AND ({tenant:String} = '' OR last_tenant = {tenant:String}
        OR startsWith(last_tenant, concat({tenant:String}, '/')))
ORDER BY last_ts DESC, alert_id
LIMIT {limit:UInt32}
