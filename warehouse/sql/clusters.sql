-- The clusters that have reported samples, with their first and last hour and sample count.
SELECT cluster, min(ts) AS first_hour, max(ts) AS last_hour, sum(samples) AS samples
FROM {db:Identifier}.gpu_samples_1h
GROUP BY cluster
ORDER BY cluster
