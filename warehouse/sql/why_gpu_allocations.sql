-- The allocations of one GPU (or MIG slice) that started by `at`, oldest first; an end after
-- `at` is not known yet at `at`, so it reads as NULL (open).
SELECT job_id, attempt, tenant, toFloat64(fraction) AS fraction, start_ts,
       if(end_ts > {at:DateTime64(3, 'UTC')}, NULL, end_ts) AS end_ts,
       if(end_ts > {at:DateTime64(3, 'UTC')}, '', end_event) AS end_event
FROM {db:Identifier}.allocations FINAL
WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
  AND mig_instance = {mig_instance:String} AND start_ts <= {at:DateTime64(3, 'UTC')}
ORDER BY start_ts, job_id, attempt
