-- The sealed days of the ledger: a day whose usage rows (sql/ledger_usage.sql on [day, day + 1))
-- were computed once and kept in ledger_days, for one idle threshold and minimum idle duration.
-- samples_fp and allocs_fp fingerprint what those rows were computed from
-- (sql/ledger_day_fingerprints.sql): a report uses the day's rows only while the fingerprints
-- it computes now are the same, so a late sample or job event puts the day back on the live
-- query until `gpuledger seal` seals it again. The latest seal of a day wins (version sealed_at).
CREATE TABLE IF NOT EXISTS ${db}.ledger_seals${local} ${on_cluster}
(
    idle_threshold_ratio Float64,
    idle_min_duration_s UInt32,
    day Date,
    seal_id UInt64,
    samples_fp UInt64,
    allocs_fp UInt64,
    usage_rows UInt64,
    sealed_at DateTime64(3, 'UTC')
)
ENGINE = ${engine:ReplacingMergeTree(sealed_at)}
ORDER BY (idle_threshold_ratio, idle_min_duration_s, day)
SETTINGS non_replicated_deduplication_window = 10000
