-- Which numbered migrations have been applied, with the checksum of the file as applied.
CREATE TABLE IF NOT EXISTS ${db}.schema_migrations${local} ${on_cluster}
(
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime64(3, 'UTC')
)
ENGINE = ${engine:ReplacingMergeTree(applied_at)}
ORDER BY version
