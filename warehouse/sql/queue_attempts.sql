-- One row per job attempt that waited, started or ended within [start, end), as the events
-- before `end` tell it: when it (re)entered the queue, left it, started and ended, how it ended
-- and the GPU-hours its allocations held (open ones counted up to `end`).
-- queued_ts: the attempt's `submitted` event; for a source that does not resubmit, the end of
-- the previous attempt when that was preempted, evicted or failed (the job went back to wait).
-- left_queue_ts: started_ts, else the terminal event that ended the attempt before it started
-- (a cancel while queued); NULL while it still waits at `end`.
-- With `all_jobs` false, only the jobs in `jobs` are read (their events, allocations and
-- attributes, through the tables' sorting keys), not the whole history.
WITH
    per_attempt AS (
        SELECT job_id, attempt,
               minOrNullIf(ts, event = 'submitted') AS submitted_ts,
               minOrNullIf(ts, event = 'started') AS started_ts,
               minOrNullIf(ts, has({terminal:Array(String)}, event)) AS ended_ts,
               argMinIf(event, ts, has({terminal:Array(String)}, event)) AS end_event,
               argMinIf(reason, ts, has({terminal:Array(String)}, event)) AS end_reason,
               max(gpu_fraction) AS gpu_fraction
        FROM {db:Identifier}.job_events
        WHERE cluster = {cluster:String}
          AND ({all_jobs:Bool} OR job_id IN {jobs:Array(String)})
          AND ts < {end:DateTime64(3, 'UTC')}
        GROUP BY job_id, attempt
    ),
    requeued AS (
        SELECT job_id, toUInt16(attempt + 1) AS attempt, ended_ts AS requeued_ts
        FROM per_attempt
        WHERE end_event IN ('preempted', 'evicted', 'failed')
    ),
    held AS (
        SELECT job_id, attempt,
               sum(toFloat64(fraction) * dateDiff('millisecond', start_ts,
                   least(coalesce(end_ts, {end:DateTime64(3, 'UTC')}),
                         {end:DateTime64(3, 'UTC')}))) / 3600000 AS gpu_hours
        FROM {db:Identifier}.allocations FINAL
        WHERE cluster = {cluster:String}
          AND ({all_jobs:Bool} OR job_id IN {jobs:Array(String)})
          AND start_ts < {end:DateTime64(3, 'UTC')}
        GROUP BY job_id, attempt
    ),
    attrs AS (
        SELECT job_id, max(tenant) AS tenant, max(queue) AS queue, max(pool) AS pool,
               max(gpu_model) AS gpu_model, max(priority) AS priority,
               max(gpus_requested) AS gpus_requested
        FROM {db:Identifier}.jobs
        WHERE cluster = {cluster:String}
          AND ({all_jobs:Bool} OR job_id IN {jobs:Array(String)})
        GROUP BY job_id
    ),
    attempts AS (
        SELECT p.job_id AS job_id, p.attempt AS attempt,
               coalesce(p.submitted_ts, r.requeued_ts) AS queued_ts,
               p.started_ts AS started_ts,
               coalesce(p.started_ts, p.ended_ts) AS left_queue_ts,
               p.ended_ts AS ended_ts, p.end_event AS end_event, p.end_reason AS end_reason,
               p.gpu_fraction AS gpu_fraction
        FROM per_attempt AS p
        LEFT JOIN requeued AS r ON r.job_id = p.job_id AND r.attempt = p.attempt
    )
SELECT a.job_id AS job_id, a.attempt AS attempt, j.tenant AS tenant, j.queue AS queue,
       j.pool AS pool, j.gpu_model AS gpu_model, j.priority AS priority,
       toFloat64(j.gpus_requested) AS gpus_requested, toFloat64(a.gpu_fraction) AS gpu_fraction,
       a.queued_ts AS queued_ts, a.started_ts AS started_ts, a.left_queue_ts AS left_queue_ts,
       a.ended_ts AS ended_ts, a.end_event AS end_event, a.end_reason AS end_reason,
       coalesce(h.gpu_hours, 0) AS gpu_hours
FROM attempts AS a
LEFT JOIN attrs AS j ON j.job_id = a.job_id
LEFT JOIN held AS h ON h.job_id = a.job_id AND h.attempt = a.attempt
WHERE (a.queued_ts < {end:DateTime64(3, 'UTC')}
       AND (a.left_queue_ts IS NULL OR a.left_queue_ts >= {start:DateTime64(3, 'UTC')}))
   OR a.started_ts >= {start:DateTime64(3, 'UTC')}
   OR a.ended_ts >= {start:DateTime64(3, 'UTC')}
ORDER BY queued_ts, job_id, attempt
