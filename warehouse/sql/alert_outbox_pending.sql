-- The notices not yet delivered: each (notifier, message_id)'s latest version, when that is
-- still pending; oldest first.
SELECT notifier, message_id, argMax(alert_id, version) AS last_alert_id,
       argMax(created_ts, version) AS created, argMax(ts, version) AS last_ts,
       argMax(state, version) AS last_state, argMax(attempts, version) AS last_attempts,
       argMax(next_try_ts, version) AS next_try, argMax(last_error, version) AS error,
       argMax(payload, version) AS last_payload, max(version) AS last_version
FROM {db:Identifier}.alert_outbox
GROUP BY notifier, message_id
HAVING last_state = 'pending'
ORDER BY created, notifier, message_id
