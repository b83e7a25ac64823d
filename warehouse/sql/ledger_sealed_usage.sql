-- The usage rows of sealed days in [{day0}, {day1}) written under the seals {seals} (the ones
-- that still hold), in the columns and types of ledger_usage.sql.
SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant, org,
       project, user, queue, workload_type, end_event, fraction, s, e, allocated_gpu_ms,
       used_gpu_hours,
       -- a row sealed before measured hours were kept (NULL) counts as measured, as it did
       coalesce(measured_gpu_hours, allocated_gpu_ms / 3600000) AS measured_gpu_hours,
       idle_gpu_hours
FROM {db:Identifier}.ledger_days
WHERE day >= {day0:Date} AND day < {day1:Date}
  AND has({seals:Array(UInt64)}, seal_id)
  AND (cluster = {cluster:String} OR {cluster:String} = '')
