-- What the scheduler calls each of some jobs of one cluster (its pod or Slurm job name and
-- namespace) and what kind of workload it is, for advice that names jobs to preempt.
SELECT job_id, max(name) AS name, max(namespace) AS namespace,
       max(workload_type) AS workload_type, max(queue) AS queue
FROM {db:Identifier}.jobs
WHERE cluster = {cluster:String} AND has({job_ids:Array(String)}, job_id)
GROUP BY job_id
ORDER BY job_id
