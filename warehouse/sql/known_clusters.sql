-- Every cluster the warehouse knows of: from samples, GPU and node inventory, or job events
-- (an imported trace has inventory and jobs but no samples).
SELECT cluster
FROM (
    SELECT DISTINCT cluster FROM {db:Identifier}.gpu_samples_1h
    UNION ALL SELECT DISTINCT cluster FROM {db:Identifier}.gpu_inventory_log
    UNION ALL SELECT DISTINCT cluster FROM {db:Identifier}.node_inventory_log
    UNION ALL SELECT DISTINCT cluster FROM {db:Identifier}.job_events
)
WHERE cluster != ''
GROUP BY cluster
ORDER BY cluster
