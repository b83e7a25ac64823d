-- Every tenant's quota per pool and GPU model in force at `at` in {cluster}: the latest
-- effective_from not after `at` (NULL limits: no limit). A row for the cluster itself wins over
-- the rows for every cluster (cluster ''), whatever their dates; {cluster} '' reads only those.
SELECT tenant, pool, gpu_model,
       argMax(guaranteed_gpus, (cluster != '', effective_from)) AS guaranteed_gpus,
       argMax(borrow_limit_gpus, (cluster != '', effective_from)) AS borrow_limit_gpus,
       argMax(lend_limit_gpus, (cluster != '', effective_from)) AS lend_limit_gpus,
       argMax(effective_from, (cluster != '', effective_from)) AS effective_since,
       argMax(cluster, (cluster != '', effective_from)) AS quota_cluster
FROM {db:Identifier}.quotas FINAL
WHERE effective_from <= {at:DateTime64(3, 'UTC')}
  AND cluster IN ('', {cluster:String})
GROUP BY tenant, pool, gpu_model
ORDER BY tenant, pool, gpu_model
