-- Keeps gpus (latest state) in step with gpu_inventory_log (history).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.gpus_mv${local} ${on_cluster}
TO ${db}.gpus${local}
AS SELECT
    ts, cluster, pool, node, gpu_uuid, gpu_index, mig_instance, mig_profile,
    vendor, gpu_model, capacity_fraction, memory_total_bytes, health, health_reason,
    driver_version, cuda_version, compute_capability, pci_bus_id, serial, source
FROM ${db}.gpu_inventory_log${local}
