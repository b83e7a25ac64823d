-- One GPU's (or MIG slice's) inventory history up to `at`, with its node's states up to `at`
-- (kind 'gpu' rows carry health, kind 'node' rows carry the node's state), oldest first.
-- The ORDER BY sits outside the union: written after the last SELECT it would order that
-- SELECT alone.
SELECT kind, ts, node, pool, gpu_model, state, reason, capacity
FROM (
    SELECT 'gpu' AS kind, ts, node, pool, gpu_model, health AS state, health_reason AS reason,
           toFloat64(capacity_fraction) AS capacity
    FROM {db:Identifier}.gpu_inventory_log
    WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
      AND mig_instance = {mig_instance:String} AND ts <= {at:DateTime64(3, 'UTC')}
    UNION ALL
    SELECT 'node' AS kind, ts, node, pool, gpu_model, state, state_reason AS reason,
           toFloat64(gpu_count) AS capacity
    FROM {db:Identifier}.node_inventory_log
    WHERE cluster = {cluster:String} AND ts <= {at:DateTime64(3, 'UTC')}
      AND node IN (SELECT node FROM {db:Identifier}.gpu_inventory_log
                   WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String})
)
ORDER BY ts, kind
