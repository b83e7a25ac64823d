-- The clusters that have reported samples, with their first and last hour and sample count.
SELECT cluster, toDateTime64(min(ts), 3, 'UTC') AS first_hour,
       toDateTime64(max(ts), 3, 'UTC') AS last_hour, sum(samples) AS samples
FROM {db:Identifier}.gpu_samples_1h
GROUP BY cluster
ORDER BY cluster
