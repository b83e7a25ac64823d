-- The allocations of one cluster overlapping [lo, hi), with their ends as stored (NULL: still
-- open) and their job's workload type, for the limits' savings over a past window.
SELECT cluster, pool, gpu_model, gpu_uuid, mig_instance, job_id, attempt, tenant,
       workload_type, toFloat64(fraction) AS fraction, start_ts, end_ts
FROM {db:Identifier}.allocations FINAL
WHERE cluster = {cluster:String}
  AND start_ts < {hi:DateTime64(3, 'UTC')}
  AND (end_ts IS NULL OR end_ts > {lo:DateTime64(3, 'UTC')})
ORDER BY tenant, job_id, attempt, gpu_uuid, mig_instance
