-- The alert history, newest first: every row (fired, repeated, resolved) at or after `since`,
-- of one rule, cluster and alert ('' = all). With `open_only`, the rows of the alerts whose
-- latest row is not one of `closed`.
SELECT ts, alert_id, alert_key, rule, severity, state, event, cluster, node, gpu_uuid, job_id,
       tenant, value, threshold, since, cost, currency, message, url, gpus, jobs, notified
FROM {db:Identifier}.alerts
WHERE ts >= {since:DateTime64(3, 'UTC')}
  AND ({rule:String} = '' OR rule = {rule:String})
  AND ({cluster:String} = '' OR cluster = {cluster:String})
  AND (NOT {open_only:Bool}
       OR alert_id IN (SELECT alert_id FROM {db:Identifier}.alerts GROUP BY alert_id
                       HAVING NOT has({closed:Array(String)}, argMax(state, ts))))
ORDER BY ts DESC, alert_id
LIMIT {limit:UInt32}
