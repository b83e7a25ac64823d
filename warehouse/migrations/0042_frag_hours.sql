-- Per sealed hour (see frag_seals), pool and GPU model: the schedulable, free and stranded
-- (FGD) GPUs at that instant. Rows of a replaced seal are deleted, or never read.
CREATE TABLE IF NOT EXISTS {{db}}.frag_hours{{local}} {{on_cluster}}
(
    day Date,
    seal_id UInt64,
    cluster LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    pool LowCardinality(String),
    gpu_model LowCardinality(String),
    capacity_gpus Float64,
    free_gpus Float64,
    stranded_gpus Float64
)
ENGINE = {{engine:MergeTree}}
PARTITION BY toYYYYMM(day)
ORDER BY (day, seal_id, ts, pool, gpu_model)
SETTINGS non_replicated_deduplication_window = 10000
