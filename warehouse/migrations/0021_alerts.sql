-- Alert history: every firing and resolution of an alert rule.
CREATE TABLE IF NOT EXISTS ${db}.alerts${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC'),
    alert_id String,
    rule LowCardinality(String),
    severity LowCardinality(String),
    state LowCardinality(String),
    cluster LowCardinality(String),
    node LowCardinality(String),
    gpu_uuid LowCardinality(String),
    job_id String,
    tenant LowCardinality(String),
    value Nullable(Float64),
    threshold Nullable(Float64),
    message String,
    notified Array(String)
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY (rule, alert_id, ts)
