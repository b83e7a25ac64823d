-- The pools and GPU models in inventory (any cluster when {cluster} is ''), for filters.
SELECT DISTINCT pool, gpu_model
FROM {db:Identifier}.gpus FINAL
WHERE ({cluster:String} = '' OR cluster = {cluster:String}) AND health != 'retired'
ORDER BY pool, gpu_model
