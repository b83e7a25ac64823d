-- Per sealed hour (see frag_seals), tenant, pool and GPU model: the stranded GPUs attributed to
-- the tenant at that instant (__unallocated__: the fragment of nodes nobody held anything on).
CREATE TABLE IF NOT EXISTS {{db}}.frag_hour_tenants{{local}} {{on_cluster}}
(
    day Date,
    seal_id UInt64,
    cluster LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    tenant LowCardinality(String),
    pool LowCardinality(String),
    gpu_model LowCardinality(String),
    stranded_gpus Float64
)
ENGINE = {{engine:MergeTree}}
PARTITION BY toYYYYMM(day)
ORDER BY (day, seal_id, ts, tenant, pool, gpu_model)
SETTINGS non_replicated_deduplication_window = 10000
