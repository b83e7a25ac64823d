-- The fleet right now: GPUs in inventory by model and health, from the latest state of each,
-- in one cluster, pool and GPU model ('' = all of them).
SELECT gpu_model, health, count() AS gpus, sum(capacity_fraction) AS capacity_gpus
FROM {db:Identifier}.gpus FINAL
WHERE ({cluster:String} = '' OR cluster = {cluster:String}) AND health != 'retired'
  AND ({pool:String} = '' OR pool = {pool:String})
  AND ({gpu_model:String} = '' OR gpu_model = {gpu_model:String})
GROUP BY gpu_model, health
ORDER BY gpu_model, health
