-- Health counters of each physical GPU at each poll: throttling (clock-event reasons),
-- volatile double-bit ECC errors, row remapping, and GPUs lost off the bus. The counters
-- belong to the physical GPU, so there is no MIG instance: every instance shares them.
-- Ordered for per-GPU time scans; one partition per day; dropped after the raw retention.
-- Nullable fields are the ones a GPU may not support (NULL, never a fake 0); a lost GPU's
-- row has gpu_lost = true and NULL counters.
CREATE TABLE IF NOT EXISTS ${db}.gpu_health${local} ${on_cluster}
(
    ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    node LowCardinality(String),
    gpu_uuid LowCardinality(String),
    -- bitmask of nvmlClocksEventReason* (0x1 idle, 0x4 SW power cap, 0x8 HW slowdown, ...)
    clock_event_reasons Nullable(UInt64),
    ecc_dbe_volatile Nullable(UInt64),
    remapped_rows_correctable Nullable(UInt32),
    remapped_rows_uncorrectable Nullable(UInt32),
    remapped_rows_pending Nullable(Bool),
    remapped_rows_failure Nullable(Bool),
    gpu_lost Bool
)
ENGINE = ${engine:MergeTree}
PARTITION BY toDate(ts)
ORDER BY (cluster, gpu_uuid, ts)
TTL toDateTime(ts) + INTERVAL ${raw_retention_days} DAY
SETTINGS non_replicated_deduplication_window = 10000
