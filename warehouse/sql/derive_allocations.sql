-- (Re)derive the allocation intervals of the given jobs from all their events, whatever order
-- or how many times the events arrived: per (job, attempt), the interval opens at the first
-- `started` (or the `started_at` a terminal event carries) and closes at the first terminal
-- event (`terminal`: collector.records.TERMINAL_EVENTS); GPUs come from the `started` event,
-- else from the terminal one. A job whose source names no GPU holds `gpus_requested` GPUs in
-- one row with gpu_uuid ''. The new rows replace the old ones (ReplacingMergeTree on version =
-- derivation time).
INSERT INTO {db:Identifier}.allocations
    (cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant, org,
     project, user, queue, workload_type, fraction, start_ts, end_ts, end_event, end_reason,
     version)
SELECT cluster, pool, node, slot.1 AS gpu_uuid, slot.2 AS mig_instance, gpu_model, job_id,
       attempt, tenant, org, project, user, queue, workload_type, slot.3 AS fraction,
       start_ts, end_ts, end_event, end_reason, toUInt64(toUnixTimestamp64Milli(now64(3)))
FROM (
    SELECT cluster, job_id, attempt,
           coalesce(minOrNullIf(ts, event = 'started'), min(started_at)) AS start_ts,
           minOrNullIf(ts, has({terminal:Array(String)}, event)) AS end_ts,
           argMinIf(event, ts, has({terminal:Array(String)}, event)) AS end_event,
           argMinIf(reason, ts, has({terminal:Array(String)}, event)) AS end_reason,
           argMinIf(gpu_uuids, ts, event = 'started' AND notEmpty(gpu_uuids)) AS started_gpus,
           argMinIf(mig_instances, ts, event = 'started' AND notEmpty(gpu_uuids)) AS started_migs,
           argMaxIf(gpu_uuids, ts, notEmpty(gpu_uuids)) AS any_gpus,
           argMaxIf(mig_instances, ts, notEmpty(gpu_uuids)) AS any_migs,
           max(gpu_fraction) AS share, max(gpus_requested) AS requested,
           argMaxIf(node, ts, node != '') AS node, max(pool) AS pool, max(gpu_model) AS gpu_model,
           max(tenant) AS tenant, max(org) AS org, max(project) AS project, max(user) AS user,
           max(queue) AS queue, max(workload_type) AS workload_type
    FROM {db:Identifier}.job_events
    WHERE (cluster, job_id) IN {jobs:Array(Tuple(String, String))}
    GROUP BY cluster, job_id, attempt
    HAVING start_ts IS NOT NULL AND (notEmpty(any_gpus) OR requested > 0)
)
ARRAY JOIN
    if(notEmpty(started_gpus),
       arrayMap((u, i) -> (u, if(length(started_migs) = length(started_gpus), started_migs[i], ''),
                           toFloat32(share)), started_gpus, arrayEnumerate(started_gpus)),
       if(notEmpty(any_gpus),
          arrayMap((u, i) -> (u, if(length(any_migs) = length(any_gpus), any_migs[i], ''),
                              toFloat32(share)), any_gpus, arrayEnumerate(any_gpus)),
          [('', '', toFloat32(requested))])) AS slot
WHERE end_ts IS NULL OR end_ts >= start_ts
