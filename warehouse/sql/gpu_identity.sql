-- One GPU's latest inventory state (a row per MIG slice, '' for a whole GPU), in every cluster
-- that names it ('' = all).
SELECT cluster, pool, node, gpu_uuid, gpu_index, mig_instance, mig_profile, vendor, gpu_model,
       toFloat64(capacity_fraction) AS capacity_fraction, memory_total_bytes, health,
       health_reason, driver_version, cuda_version, ts
FROM {db:Identifier}.gpus FINAL
WHERE gpu_uuid = {gpu_uuid:String} AND ({cluster:String} = '' OR cluster = {cluster:String})
ORDER BY cluster, mig_instance
