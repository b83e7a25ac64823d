-- Which of the given samples gpu_samples already holds, by (cluster, gpu_uuid, mig_instance,
-- ts in ms, source): a replay does not write those again. uuids, start and end narrow the scan.
SELECT DISTINCT cluster, gpu_uuid, mig_instance, toUnixTimestamp64Milli(ts) AS ts_ms, source
FROM {db:Identifier}.gpu_samples
WHERE gpu_uuid IN {uuids:Array(String)}
  AND ts BETWEEN {start:DateTime64(3, 'UTC')} AND {end:DateTime64(3, 'UTC')}
  AND (cluster, gpu_uuid, mig_instance, toUnixTimestamp64Milli(ts), source)
      IN {keys:Array(Tuple(String, String, String, Int64, String))}
