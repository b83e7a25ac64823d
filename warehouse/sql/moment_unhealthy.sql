-- The GPUs (or MIG slices) whose latest inventory state is unhealthy or down, in one cluster
-- ('' = all), with the reason their source gave (an Xid, lost off the bus...).
SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, health, health_reason,
       toFloat64(capacity_fraction) AS capacity_fraction, ts AS since
FROM {db:Identifier}.gpus FINAL
WHERE ({cluster:String} = '' OR cluster = {cluster:String})
  AND health IN ('unhealthy', 'down')
ORDER BY cluster, node, gpu_uuid, mig_instance
