-- The attributes the ledger groups by, per job and per GPU, for attributing energy.
SELECT cluster, job_id, max(tenant) AS tenant, max(org) AS org, max(project) AS project,
       max(user) AS user, max(queue) AS queue, max(workload_type) AS workload_type
FROM {db:Identifier}.allocations FINAL
WHERE (cluster = {cluster:String} OR {cluster:String} = '')
  AND start_ts < {b:DateTime64(3)} AND coalesce(end_ts, {b:DateTime64(3)}) > {a:DateTime64(3)}
GROUP BY cluster, job_id
