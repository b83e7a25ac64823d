-- The sealed hours of fragmentation: for one cluster, day and setting of the measure (scope,
-- task-mix window, mix event), the stranded capacity at every hour from the day's midnight up
-- to last_ts, computed once and kept in frag_hours and frag_hour_tenants under seal_id. fp
-- fingerprints what they were computed from (sql/frag_fingerprints.sql): a reader uses them
-- only while the fingerprint it computes now is the same. The latest seal of a day wins.
CREATE TABLE IF NOT EXISTS {{db}}.frag_seals{{local}} {{on_cluster}}
(
    cluster LowCardinality(String),
    scope LowCardinality(String),
    window_s UInt32,
    mix_event LowCardinality(String),
    day Date,
    last_ts DateTime64(3, 'UTC'),
    seal_id UInt64,
    fp UInt64,
    series_rows UInt64,
    tenant_rows UInt64,
    sealed_at DateTime64(3, 'UTC')
)
ENGINE = {{engine:ReplacingMergeTree(sealed_at)}}
ORDER BY (cluster, scope, window_s, mix_event, day)
SETTINGS non_replicated_deduplication_window = 10000
