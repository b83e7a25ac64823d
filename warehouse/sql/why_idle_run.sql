-- The current idle run of one GPU (or MIG slice) between `since` and `at`, from the 1-minute
-- rollup: the minutes after the last minute whose busiest sample reached `threshold`.
-- first_minute/last_minute bound the run (NULL when the latest minute is busy or there are no
-- samples), minutes counts its sampled minutes, peak_util is its busiest sample; latest_* is
-- the latest sampled minute (its mean and busiest sample), what a busy GPU is doing now.
WITH
    per_minute AS (
        SELECT toDateTime64(ts, 3, 'UTC') AS minute, max(util_ratio_max) AS util_max,
               sum(util_ratio_sum) / nullIf(sum(util_samples), 0) AS util_mean
        FROM {db:Identifier}.gpu_samples_1m
        WHERE cluster = {cluster:String} AND gpu_uuid = {gpu_uuid:String}
          AND mig_instance = {mig_instance:String}
          AND ts >= toStartOfMinute({since:DateTime64(3, 'UTC')})
          AND ts < {at:DateTime64(3, 'UTC')}
        GROUP BY minute
        HAVING util_max IS NOT NULL
    ),
    last_busy AS (
        SELECT maxOrNull(minute) AS minute FROM per_minute
        WHERE util_max >= {threshold:Float64}
    ),
    latest AS (
        SELECT maxOrNull(minute) AS at_minute, argMax(util_mean, minute) AS at_mean,
               argMax(util_max, minute) AS at_max
        FROM per_minute
    )
SELECT (SELECT minute FROM last_busy) AS last_busy_minute,
       minOrNull(minute) AS first_minute, maxOrNull(minute) AS last_minute,
       count() AS minutes, max(util_max) AS peak_util,
       (SELECT count() FROM per_minute) AS sampled_minutes,
       (SELECT at_minute FROM latest) AS latest_minute,
       (SELECT at_mean FROM latest) AS latest_util_mean,
       (SELECT at_max FROM latest) AS latest_util_max
FROM per_minute
WHERE (SELECT minute FROM last_busy) IS NULL OR minute > (SELECT minute FROM last_busy)
