-- The allocations cut short in [a, b) because their source stopped observing (end_event
-- 'censored', a trace's end), per cluster: how many, where the observation ended, and the
-- GPU-hours they held in the window (part of its allocated hours, counted up to the cut).
-- FINAL merges only the rows whose key some version marked censored (a filter on the sorting
-- key is applied before the merge; one on end_event would merge the whole table first).
SELECT cluster, count() AS allocations, max(end_ts) AS observation_end,
       sum(toFloat64(fraction) * dateDiff('millisecond', greatest(start_ts, {a:DateTime64(3)}),
                                          end_ts)) / 3600000 AS gpu_hours
FROM {db:Identifier}.allocations FINAL
WHERE (cluster, job_id, attempt, gpu_uuid, mig_instance) IN (
        SELECT cluster, job_id, attempt, gpu_uuid, mig_instance
        FROM {db:Identifier}.allocations
        WHERE end_event = 'censored'
          AND end_ts > {a:DateTime64(3)} AND end_ts <= {b:DateTime64(3)}
          AND (cluster = {cluster:String} OR {cluster:String} = ''))
  AND end_event = 'censored'
  AND end_ts > {a:DateTime64(3)} AND end_ts <= {b:DateTime64(3)}
  AND (cluster = {cluster:String} OR {cluster:String} = '')
GROUP BY cluster
ORDER BY cluster
