-- The current inventory of GPUs: the latest state of each wins (read with FINAL or argMax).
CREATE TABLE IF NOT EXISTS ${db}.gpus${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC'),
    cluster LowCardinality(String),
    pool LowCardinality(String),
    node LowCardinality(String),
    gpu_uuid LowCardinality(String),
    gpu_index UInt16,
    mig_instance LowCardinality(String),
    mig_profile LowCardinality(String),
    vendor LowCardinality(String),
    gpu_model LowCardinality(String),
    capacity_fraction Float32,
    memory_total_bytes Nullable(UInt64),
    health LowCardinality(String),
    health_reason String,
    driver_version LowCardinality(String),
    cuda_version LowCardinality(String),
    compute_capability LowCardinality(String),
    pci_bus_id String,
    serial String,
    source LowCardinality(String)
)
ENGINE = ${engine:ReplacingMergeTree(ts)}
ORDER BY (cluster, gpu_uuid, mig_instance)
