-- The inventory as of `at`, counted by pool, GPU model, driver, CUDA version and health: every
-- GPU's (or MIG slice's) latest row at or before `at`, with its node's latest state. Retired
-- GPUs are left out. units: GPUs or MIG slices; gpus: physical GPUs; capacity_gpus: whole-GPU
-- equivalents; on_unready_nodes: units whose node is not ready (drained, down, retired), so
-- their capacity is not schedulable whatever their own health. '' pool or model: all of them.
WITH
    gpu AS (
        SELECT gpu_uuid, mig_instance, argMax(node, ts) AS node, argMax(pool, ts) AS pool,
               argMax(gpu_model, ts) AS gpu_model, argMax(driver_version, ts) AS driver_version,
               argMax(cuda_version, ts) AS cuda_version, argMax(health, ts) AS health,
               argMax(toFloat64(capacity_fraction), ts) AS capacity
        FROM {db:Identifier}.gpu_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid, mig_instance
    ),
    node AS (
        SELECT node, argMax(state, ts) AS state
        FROM {db:Identifier}.node_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
        GROUP BY node
    )
SELECT g.pool AS pool, g.gpu_model AS gpu_model, g.driver_version AS driver_version,
       g.cuda_version AS cuda_version, g.health AS health,
       toInt64(uniqExact(g.node)) AS nodes, toInt64(count()) AS units,
       toInt64(uniqExact(g.gpu_uuid)) AS gpus, sum(g.capacity) AS capacity_gpus,
       toInt64(countIf(n.state NOT IN ('', 'ready'))) AS on_unready_nodes
FROM gpu AS g
LEFT JOIN node AS n ON n.node = g.node
WHERE g.health != 'retired'
  AND ({pool:String} = '' OR g.pool = {pool:String})
  AND ({gpu_model:String} = '' OR g.gpu_model = {gpu_model:String})
GROUP BY pool, gpu_model, driver_version, cuda_version, health
ORDER BY pool, gpu_model, driver_version, cuda_version, health
