-- Each GPU's latest pool, node and model, for attributing energy by GPU attributes.
SELECT cluster, gpu_uuid, argMax(pool, ts) AS pool, argMax(node, ts) AS node,
       argMax(gpu_model, ts) AS gpu_model
FROM {db:Identifier}.gpu_inventory_log
WHERE (cluster = {cluster:String} OR {cluster:String} = '') AND mig_instance = ''
GROUP BY cluster, gpu_uuid
