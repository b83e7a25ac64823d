-- Alert notices waiting for a notifier (webhook, Slack, e-mail, log), so that one that is down
-- gets them when it comes back, even after a restart: one row per notice, notifier and change
-- (queued, a failed try, delivered, given up); the highest version of a (notifier, message_id)
-- is its state. payload is the notice as JSON, as the notifier is sent it.
CREATE TABLE IF NOT EXISTS {{db}}.alert_outbox{{local}} {{on_cluster}}
(
    notifier LowCardinality(String),
    message_id String,
    alert_id String,
    created_ts DateTime64(3, 'UTC'),
    ts DateTime64(3, 'UTC'),
    state LowCardinality(String),
    attempts UInt32,
    next_try_ts DateTime64(3, 'UTC'),
    last_error String,
    payload String,
    version UInt64
)
ENGINE = {{engine:ReplacingMergeTree(version)}}
ORDER BY (notifier, message_id)
TTL toDateTime(created_ts) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000
