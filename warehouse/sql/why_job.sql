-- One job's attempts as its events up to `at` tell them: what it asks for, where it waits and
-- what became of each attempt. queued_ts: the attempt's `submitted` event (else NULL: the
-- caller falls back to the previous attempt's end).
SELECT attempt,
       max(tenant) AS tenant, max(queue) AS queue, max(pool) AS pool,
       max(gpu_model) AS gpu_model, max(priority) AS priority,
       max(priority_class) AS priority_class, toFloat64(max(gpus_requested)) AS gpus_requested,
       toFloat64(max(gpu_fraction)) AS gpu_fraction,
       minOrNullIf(ts, event = 'submitted') AS queued_ts,
       minOrNullIf(ts, event = 'started') AS started_ts,
       minOrNullIf(ts, has({terminal:Array(String)}, event)) AS ended_ts,
       argMinIf(event, ts, has({terminal:Array(String)}, event)) AS end_event,
       argMinIf(reason, ts, has({terminal:Array(String)}, event)) AS end_reason,
       argMaxIf(node, ts, node != '') AS node,
       argMaxIf(gpu_uuids, ts, notEmpty(gpu_uuids)) AS gpu_uuids,
       max(ts) AS last_event_ts
FROM {db:Identifier}.job_events
WHERE cluster = {cluster:String} AND job_id = {job_id:String} AND ts <= {at:DateTime64(3, 'UTC')}
GROUP BY attempt
ORDER BY attempt
