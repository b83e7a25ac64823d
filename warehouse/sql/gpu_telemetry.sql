-- One GPU's telemetry (all its MIG slices together) over [start, end) in buckets of `step_s`
-- seconds, from the 1-minute rollup: utilisation (mean of the samples and the busiest one),
-- the most memory used and held, mean power, the highest temperature and Xid, the mean SM clock
-- and tensor activity (NULL where no sample had them: the source does not report them), and how
-- many minutes had samples. With `within` set, only the minutes wholly inside one of the intervals
-- [starts[i], ends[i]) are read (what one tenant may see of a GPU it held). A bucket is dated
-- by its first minute read, so that it never reads as a time outside those intervals.
SELECT toDateTime64(toStartOfInterval(ts, toIntervalSecond({step_s:UInt32})), 3, 'UTC') AS bucket,
       min(minute) AS t,
       sum(util_ratio_sum) / nullIf(sum(util_samples), 0) AS util_mean,
       max(util_ratio_max) AS util_max,
       max(memory_used_bytes_max) AS memory_used_bytes,
       max(memory_total_bytes_max) AS memory_total_bytes,
       sum(power_watts_sum) / nullIf(sum(power_samples), 0) AS power_watts,
       max(temperature_celsius_max) AS temperature_celsius,
       max(xid_max) AS xid,
       sum(sm_clock_mhz_sum) / nullIf(sum(sm_clock_samples), 0) AS sm_clock_mhz,
       sum(tensor_active_ratio_sum) / nullIf(sum(tensor_samples), 0) AS tensor_active_ratio,
       uniqExact(minute) AS minutes
FROM (
    SELECT *, toDateTime64(ts, 3, 'UTC') AS minute
    FROM {db:Identifier}.gpu_samples_1m
    WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
      AND ts >= toStartOfMinute({start:DateTime64(3, 'UTC')})
      AND ts < {end:DateTime64(3, 'UTC')}
)
WHERE NOT {within:Bool}
   OR arrayExists((s, e) -> minute >= s AND minute + toIntervalMinute(1) <= e,
                  {starts:Array(DateTime64(3, 'UTC'))}, {ends:Array(DateTime64(3, 'UTC'))})
GROUP BY bucket
ORDER BY bucket
