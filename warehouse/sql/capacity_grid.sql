-- Each physical GPU over the hour [start, end): where it sits (node, index), its model, pool
-- and health as of the hour's end (retired ones left out), the share of it jobs held on
-- average over the hour (held_gpus, from the allocations) with who held it (holders: tenant,
-- job, share-hours / hour), and its mean utilisation over the hour's samples (util_ratio,
-- NULL without samples; from the 1-hour rollup, so the hour must start on the hour).
-- MIG slices are folded into their GPU.
WITH
    unit AS (
        SELECT gpu_uuid, mig_instance, argMax(node, ts) AS node,
               argMax(gpu_index, ts) AS gpu_index, argMax(pool, ts) AS pool,
               argMax(gpu_model, ts) AS gpu_model, argMax(health, ts) AS health,
               argMax(toFloat64(capacity_fraction), ts) AS capacity
        FROM {db:Identifier}.gpu_inventory_log
        WHERE cluster = {cluster:String} AND ts < {end:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid, mig_instance
    ),
    by_job AS (
        SELECT gpu_uuid, mig_instance, tenant, job_id,
               sum(toFloat64(fraction) * dateDiff('millisecond',
                   greatest(start_ts, {start:DateTime64(3, 'UTC')}),
                   least(coalesce(end_ts, {end:DateTime64(3, 'UTC')}), {end:DateTime64(3, 'UTC')})))
               / dateDiff('millisecond', {start:DateTime64(3, 'UTC')}, {end:DateTime64(3, 'UTC')})
                   AS job_held
        FROM {db:Identifier}.allocations FINAL
        WHERE cluster = {cluster:String} AND gpu_uuid != ''
          AND start_ts < {end:DateTime64(3, 'UTC')}
          AND coalesce(end_ts, {end:DateTime64(3, 'UTC')}) > {start:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid, mig_instance, tenant, job_id
    ),
    held AS (
        SELECT gpu_uuid, mig_instance, sum(job_held) AS unit_held,
               groupArray(CAST((tenant, job_id, job_held),
                               'Tuple(tenant String, job_id String, held Float64)')) AS holders
        FROM by_job
        GROUP BY gpu_uuid, mig_instance
    ),
    util AS (
        SELECT gpu_uuid, mig_instance, sum(util_ratio_sum) AS util_sum,
               sum(util_samples) AS util_n
        FROM {db:Identifier}.gpu_samples_1h
        WHERE cluster = {cluster:String} AND ts >= {start:DateTime64(3, 'UTC')}
          AND ts < {end:DateTime64(3, 'UTC')}
        GROUP BY gpu_uuid, mig_instance
    )
SELECT any(u.node) AS node, toInt64(min(u.gpu_index)) AS gpu_index, u.gpu_uuid AS gpu_uuid,
       any(u.pool) AS pool, any(u.gpu_model) AS gpu_model,
       if(countIf(u.health != 'healthy') > 0, anyIf(u.health, u.health != 'healthy'), 'healthy')
           AS health,
       sum(u.capacity) AS capacity_gpus, sum(h.unit_held) AS held_gpus,
       sum(t.util_sum) / nullIf(sum(t.util_n), 0) AS util_ratio,
       arrayFlatten(groupArray(h.holders)) AS holders
FROM unit AS u
LEFT JOIN held AS h ON h.gpu_uuid = u.gpu_uuid AND h.mig_instance = u.mig_instance
LEFT JOIN util AS t ON t.gpu_uuid = u.gpu_uuid AND t.mig_instance = u.mig_instance
WHERE u.health != 'retired'
GROUP BY u.gpu_uuid
ORDER BY node, gpu_index, gpu_uuid
