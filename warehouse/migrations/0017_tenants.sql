-- Tenants: org -> project, with the lead who may see the tenant's rows.
CREATE TABLE IF NOT EXISTS ${db}.tenants${local} ${on_cluster}
(
    tenant String,
    org LowCardinality(String),
    project LowCardinality(String),
    display_name String,
    lead String,
    cost_center String,
    updated_at DateTime64(3, 'UTC')
)
ENGINE = ${engine:ReplacingMergeTree(updated_at)}
ORDER BY tenant
