-- The alerts still open: each alert_id's latest row, when its state is not one of `closed`,
-- with the time it first fired (opened_ts) and last told anyone (last_ts). A restarted process
-- rebuilds its open alerts from these.
SELECT alert_id, argMax(alert_key, ts) AS key, argMax(rule, ts) AS last_rule,
       argMax(state, ts) AS last_state, min(ts) AS opened_ts, max(ts) AS last_ts,
       argMax(notified, ts) AS last_notified, argMax(details, ts) AS last_details
FROM {db:Identifier}.alerts
GROUP BY alert_id
HAVING NOT has({closed:Array(String)}, last_state)
ORDER BY opened_ts, alert_id
