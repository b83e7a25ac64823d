-- Fleet overview per hour: GPUs reporting, GPUs allocated, GPUs' worth of measured use, of one
-- cluster, pool and GPU model ('' = all of them).
-- A GPU's pool is its pool in the inventory now (samples carry none); a job's is the pool its
-- allocation names.
-- capacity_gpus: GPUs (or MIG slices, by their share) that reported samples in the hour.
-- used_gpus: sum over GPUs of their mean utilisation in the hour (from the 1-hour rollup).
-- allocated_gpus: GPU-hours held by jobs in the hour (allocation intervals x fraction).
WITH
    usage AS (
        SELECT ts, count() AS capacity_gpus, sum(util / n) AS used_gpus
        FROM (
            SELECT ts, cluster, gpu_uuid, mig_instance, sum(samples) AS n,
                   sum(util_ratio_sum) AS util
            FROM {db:Identifier}.gpu_samples_1h
            WHERE ({cluster:String} = '' OR cluster = {cluster:String})
              AND ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
              AND ({pool:String} = '' OR (cluster, gpu_uuid) IN (
                    SELECT cluster, gpu_uuid FROM {db:Identifier}.gpus FINAL
                    WHERE pool = {pool:String}))
            GROUP BY ts, cluster, gpu_uuid, mig_instance
            HAVING {gpu_model:String} = '' OR max(gpu_model) = {gpu_model:String}
        )
        GROUP BY ts
    ),
    held AS (
        SELECT hour AS ts,
               sum(fraction * dateDiff('millisecond', greatest(start_ts, hour),
                   least(coalesce(end_ts, {end:DateTime64(3)}), hour + INTERVAL 1 HOUR))
                   ) / 3600000 AS allocated_gpus
        FROM {db:Identifier}.allocations FINAL
        ARRAY JOIN arrayMap(i -> toStartOfHour(start_ts) + toIntervalHour(i),
                   range(toUInt32(dateDiff('hour', toStartOfHour(start_ts),
                         toStartOfHour(coalesce(end_ts, {end:DateTime64(3)}))) + 1))) AS hour
        WHERE ({cluster:String} = '' OR cluster = {cluster:String})
          AND ({pool:String} = '' OR pool = {pool:String})
          AND ({gpu_model:String} = '' OR gpu_model = {gpu_model:String})
          AND start_ts < {end:DateTime64(3)}
          AND coalesce(end_ts, {end:DateTime64(3)}) > {start:DateTime64(3)}
          AND hour >= {start:DateTime64(3)} AND hour < {end:DateTime64(3)}
        GROUP BY hour
    )
SELECT toDateTime64(usage.ts, 3, 'UTC') AS ts, usage.capacity_gpus AS capacity_gpus,
       coalesce(held.allocated_gpus, 0) AS allocated_gpus, usage.used_gpus AS used_gpus
FROM usage LEFT JOIN held ON usage.ts = held.ts
ORDER BY usage.ts
