-- Every tenant's quota per pool and GPU model in force at `at`: the latest effective_from not
-- after `at` (NULL limits: no limit).
SELECT tenant, pool, gpu_model,
       argMax(guaranteed_gpus, effective_from) AS guaranteed_gpus,
       argMax(borrow_limit_gpus, effective_from) AS borrow_limit_gpus,
       argMax(lend_limit_gpus, effective_from) AS lend_limit_gpus,
       max(effective_from) AS effective_since
FROM {db:Identifier}.quotas FINAL
WHERE effective_from <= {at:DateTime64(3, 'UTC')}
GROUP BY tenant, pool, gpu_model
ORDER BY tenant, pool, gpu_model
