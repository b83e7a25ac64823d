-- Keeps nodes (latest state) in step with node_inventory_log (history).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.nodes_mv${local} ${on_cluster}
TO ${db}.nodes${local}
AS SELECT
    ts, cluster, pool, node, vendor, gpu_model, gpu_count, state, state_reason, cpu_milli,
    memory_bytes, source
FROM ${db}.node_inventory_log${local}
