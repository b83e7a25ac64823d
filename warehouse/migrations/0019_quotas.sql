-- GPU quotas per tenant, pool and GPU model, effective-dated: the latest effective_from not
-- after an instant is the quota at that instant. NULL limits mean "no limit".
CREATE TABLE IF NOT EXISTS ${db}.quotas${local} ${on_cluster}
(
    effective_from DateTime64(3, 'UTC'),
    tenant String,
    pool LowCardinality(String),
    gpu_model LowCardinality(String),
    guaranteed_gpus Float64,
    borrow_limit_gpus Nullable(Float64),
    lend_limit_gpus Nullable(Float64),
    updated_at DateTime64(3, 'UTC')
)
ENGINE = ${engine:ReplacingMergeTree(updated_at)}
ORDER BY (tenant, pool, gpu_model, effective_from)
