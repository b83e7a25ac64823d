-- Every row of one advice (its proposal and each change of its status), oldest first.
SELECT ts, advice_id, kind, cluster, pool, gpu_model, from_tenant, to_tenant, gpus, job_ids,
       reason, payload, status
FROM {db:Identifier}.advice
WHERE advice_id = {advice_id:String}
ORDER BY ts, status
