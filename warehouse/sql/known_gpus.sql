-- Which of the given (cluster, gpu_uuid) pairs have inventory (a row in `gpus`, any state).
-- A MIG instance's rows carry its parent's gpu_uuid, as its samples do.
SELECT DISTINCT cluster, gpu_uuid
FROM {db:Identifier}.gpus
WHERE (cluster, gpu_uuid) IN {keys:Array(Tuple(String, String))}
