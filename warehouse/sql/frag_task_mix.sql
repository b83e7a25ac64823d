-- The typical tasks at each instant t_i = start + i * step_ms (i < n): the request shapes of
-- the job attempts with an `{event}` event in the trailing window (t_i - window_ms, t_i], i.e.
-- ts <= t_i < ts + window_ms. A shape is (gpu_model, GPUs on one node, share of each GPU): GPUs
-- are the GPUs the event names, else gpus_requested / gpu_fraction (gpus_requested is already
-- fractional for shared GPUs). Requests for no GPU are left out. Each attempt counts once per
-- shape. Each event is expanded only over the instants whose window holds it.
SELECT {start:DateTime64(3, 'UTC')} + toIntervalMillisecond(i * {step_ms:UInt64}) AS ts,
       gpu_model, gpus, share, uniqExact(job_id, attempt) AS attempts
FROM (
    SELECT job_id, attempt, gpu_model,
           toUInt32(if(notEmpty(gpu_uuids), length(gpu_uuids),
                       greatest(1, round(gpus_requested / gpu_fraction)))) AS gpus,
           round(toFloat64(gpu_fraction), 6) AS share,
           toInt64(greatest({step_ms:UInt64}, 1)) AS step,
           toUnixTimestamp64Milli(ts) - toUnixTimestamp64Milli({start:DateTime64(3, 'UTC')})
               AS from_ms,
           if(from_ms <= 0, 0, intDiv(from_ms + step - 1, step)) AS first,
           least({n:UInt32} - 1,
                 intDiv(from_ms + toInt64({window_ms:UInt64}) + step - 1, step) - 1) AS last
    FROM {db:Identifier}.job_events
    WHERE cluster = {cluster:String} AND event = {event:String}
      AND (gpus_requested > 0 OR notEmpty(gpu_uuids))
      AND ts > {start:DateTime64(3, 'UTC')} - toIntervalMillisecond({window_ms:UInt64})
      AND ts <= {last:DateTime64(3, 'UTC')}
)
ARRAY JOIN range(toUInt32(first), toUInt32(greatest(last + 1, first))) AS i
GROUP BY ts, gpu_model, gpus, share
ORDER BY ts, gpu_model, gpus, share
