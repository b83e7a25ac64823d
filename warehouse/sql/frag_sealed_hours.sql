-- The sealed stranded capacity per hour, pool and GPU model of the seals {seals} (the ones
-- that still hold), whole days.
SELECT ts, pool, gpu_model, capacity_gpus, free_gpus, stranded_gpus
FROM {db:Identifier}.frag_hours
WHERE day >= {day0:Date} AND day < {day1:Date} AND has({seals:Array(UInt64)}, seal_id)
