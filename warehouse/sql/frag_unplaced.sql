-- GPUs held at each instant t_i = start + i * step_ms (i < n) by allocations whose source named
-- no GPU (gpu_uuid ''): they hold capacity that no node's free state can show. Each allocation
-- is expanded only over the instants it covers (start_ts <= t_i < coalesce(end_ts, +inf)).
SELECT {start:DateTime64(3, 'UTC')} + toIntervalMillisecond(i * {step_ms:UInt64}) AS ts,
       sum(fraction) AS held_gpus
FROM (
    SELECT toFloat64(fraction) AS fraction,
           toInt64(greatest({step_ms:UInt64}, 1)) AS step,
           toUnixTimestamp64Milli(start_ts)
               - toUnixTimestamp64Milli({start:DateTime64(3, 'UTC')}) AS from_ms,
           toUnixTimestamp64Milli(end_ts)
               - toUnixTimestamp64Milli({start:DateTime64(3, 'UTC')}) AS to_ms,
           if(from_ms <= 0, 0, intDiv(from_ms + step - 1, step)) AS first,
           if(end_ts IS NULL, {n:UInt32} - 1,
              least({n:UInt32} - 1, intDiv(assumeNotNull(to_ms) + step - 1, step) - 1)) AS last
    FROM {db:Identifier}.allocations FINAL
    WHERE cluster = {cluster:String} AND gpu_uuid = ''
      AND start_ts <= {last:DateTime64(3, 'UTC')}
      AND (end_ts IS NULL OR end_ts > {start:DateTime64(3, 'UTC')})
)
ARRAY JOIN range(toUInt32(first), toUInt32(greatest(last + 1, first))) AS i
GROUP BY ts
ORDER BY ts
