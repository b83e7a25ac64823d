-- Who did what: every export, advice application and admission decision.
CREATE TABLE IF NOT EXISTS ${db}.audit_log${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC'),
    actor String,
    action LowCardinality(String),
    object String,
    outcome LowCardinality(String),
    detail String
)
ENGINE = ${engine:MergeTree}
PARTITION BY toYYYYMM(ts)
ORDER BY ts
