-- Every reported state of every GPU or MIG slice, kept as history: capacity over time
-- (GPUs added, unhealthy, down, retired) is read from here.
CREATE TABLE IF NOT EXISTS ${db}.gpu_inventory_log${local} ${on_cluster}
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
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, gpu_uuid, mig_instance, ts)
SETTINGS non_replicated_deduplication_window = 10000
