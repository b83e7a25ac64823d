-- Folds job_events into jobs.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.jobs_mv${local} ${on_cluster}
TO ${db}.jobs${local}
AS SELECT
    cluster, job_id,
    max(name) AS name, max(tenant) AS tenant, max(org) AS org, max(project) AS project,
    max(user) AS user, max(namespace) AS namespace, max(pool) AS pool, max(queue) AS queue,
    max(priority) AS priority, max(priority_class) AS priority_class,
    max(workload_type) AS workload_type, max(gpu_model) AS gpu_model,
    max(gpus_requested) AS gpus_requested,
    minOrNullIf(ts, event = 'submitted') AS submitted_at,
    minOrNullIf(ts, event = 'started') AS first_started_at,
    max(ts) AS last_event_at,
    max(attempt) AS attempts,
    count() AS events,
    argMaxState(event, (ts, toUInt8(indexOf(
        ['submitted', 'admitted', 'started', 'finished', 'failed', 'preempted', 'evicted',
         'cancelled'], event)))) AS state,
    argMaxState(reason, (ts, toUInt8(indexOf(
        ['submitted', 'admitted', 'started', 'finished', 'failed', 'preempted', 'evicted',
         'cancelled'], event)))) AS state_reason
FROM ${db}.job_events${local}
GROUP BY cluster, job_id
