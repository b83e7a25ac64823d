-- Prices, effective-dated: per GPU-hour of a model (and pool; '' = every pool), or per kWh
-- (resource 'energy_kwh'). Decimal, never float.
CREATE TABLE IF NOT EXISTS ${db}.price_book${local} ${on_cluster}
(
    effective_from DateTime64(3, 'UTC'),
    resource LowCardinality(String),
    gpu_model LowCardinality(String),
    pool LowCardinality(String),
    currency LowCardinality(String),
    price Decimal(18, 6),
    updated_at DateTime64(3, 'UTC')
)
ENGINE = ${engine:ReplacingMergeTree(updated_at)}
ORDER BY (resource, gpu_model, pool, effective_from)
