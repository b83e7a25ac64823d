-- Per GPU (or MIG instance) and minute, straight from the raw samples: the same figures as
-- ledger_minutes_rollup.sql, computed without the rollup. Included by ledger_usage.sql.
SELECT cluster, gpu_uuid, mig_instance, toDateTime64(toStartOfMinute(ts), 3, 'UTC') AS m,
       sum(coalesce(util_ratio, 0)) / nullIf(count(util_ratio), 0) AS util,
       max(util_ratio) AS umax,
       max(job_id) AS holder
FROM {db:Identifier}.gpu_samples
WHERE (cluster = {cluster:String} OR {cluster:String} = '')
  AND ts >= {lo:DateTime64(3)} AND ts < {hi:DateTime64(3)}
GROUP BY cluster, gpu_uuid, mig_instance, m
