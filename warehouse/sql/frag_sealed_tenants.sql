-- The sealed stranded GPUs per hour, tenant, pool and GPU model of the seals {seals} (the ones
-- that still hold), whole days.
SELECT ts, tenant, pool, gpu_model, stranded_gpus
FROM {db:Identifier}.frag_hour_tenants
WHERE day >= {day0:Date} AND day < {day1:Date} AND has({seals:Array(UInt64)}, seal_id)
