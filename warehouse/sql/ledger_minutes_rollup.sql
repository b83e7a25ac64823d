-- Per GPU (or MIG instance) and minute, from the 1-minute rollup: mean utilisation, the
-- highest sample, and the job label the samples carried. Included by ledger_usage.sql.
SELECT cluster, gpu_uuid, mig_instance, toDateTime64(ts, 3, 'UTC') AS m,
       sum(util_ratio_sum) / nullIf(sum(util_samples), 0) AS util,
       max(util_ratio_max) AS umax,
       max(job_id) AS holder
FROM {db:Identifier}.gpu_samples_1m
WHERE (cluster = {cluster:String} OR {cluster:String} = '')
  AND ts >= toDateTime({lo:DateTime64(3)}) AND ts < toDateTime({hi:DateTime64(3)})
GROUP BY cluster, gpu_uuid, mig_instance, m
