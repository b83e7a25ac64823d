-- The time of the newest raw sample of a cluster (NULL when it has none).
SELECT maxOrNull(ts) FROM {db:Identifier}.gpu_samples WHERE cluster = {cluster:String}
