-- How a namespace, a label (key=value) or a Slurm account maps to a tenant; lower rank wins.
CREATE TABLE IF NOT EXISTS ${db}.tenant_rules${local} ${on_cluster}
(
    kind LowCardinality(String),
    pattern String,
    tenant String,
    rank UInt16,
    updated_at DateTime64(3, 'UTC')
)
ENGINE = ${engine:ReplacingMergeTree(updated_at)}
ORDER BY (kind, pattern)
