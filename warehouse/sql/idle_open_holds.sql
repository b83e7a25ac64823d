-- The allocations open at `at` (start_ts <= at < end_ts, or still open) in one cluster ('' =
-- all), of one tenant ('' = all; an org takes in its projects), each with its GPU's mean
-- utilisation over the last `util_window_s` seconds before `at` (not before the job started),
-- from the 1-minute rollup: util_mean is NULL without a sample in that time. A job whose source
-- names no GPU has gpu_uuid '' and no utilisation.
WITH
    open AS (
        SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant,
               toFloat64(fraction) AS fraction, start_ts,
               greatest(start_ts, {at:DateTime64(3, 'UTC')}
                        - toIntervalSecond({util_window_s:UInt32})) AS util_from
        FROM {db:Identifier}.allocations FINAL
        WHERE ({cluster:String} = '' OR cluster = {cluster:String})
          AND start_ts <= {at:DateTime64(3, 'UTC')}
          AND (end_ts IS NULL OR end_ts > {at:DateTime64(3, 'UTC')})
          AND ({tenant:String} = '' OR tenant = {tenant:String}
               OR startsWith(tenant, concat({tenant:String}, '/')))
    ),
    recent AS (
        SELECT cluster, gpu_uuid, mig_instance, toDateTime64(ts, 3, 'UTC') AS minute,
               util_ratio_sum, util_samples
        FROM {db:Identifier}.gpu_samples_1m
        WHERE (cluster, gpu_uuid, mig_instance) IN
                  (SELECT cluster, gpu_uuid, mig_instance FROM open WHERE gpu_uuid != '')
          AND ts >= toStartOfMinute({at:DateTime64(3, 'UTC')}
                                    - toIntervalSecond({util_window_s:UInt32}))
          AND ts < {at:DateTime64(3, 'UTC')}
    ),
    util AS (
        SELECT o.cluster AS cluster, o.job_id AS job_id, o.attempt AS attempt,
               o.gpu_uuid AS gpu_uuid, o.mig_instance AS mig_instance,
               sum(r.util_ratio_sum) / nullIf(sum(r.util_samples), 0) AS util_mean
        FROM open AS o
        INNER JOIN recent AS r
            ON r.cluster = o.cluster AND r.gpu_uuid = o.gpu_uuid
           AND r.mig_instance = o.mig_instance
        WHERE r.minute >= toStartOfMinute(o.util_from)
        GROUP BY cluster, job_id, attempt, gpu_uuid, mig_instance
    )
SELECT o.cluster AS cluster, o.pool AS pool, o.node AS node, o.gpu_uuid AS gpu_uuid,
       o.mig_instance AS mig_instance, o.gpu_model AS gpu_model, o.job_id AS job_id,
       o.attempt AS attempt, o.tenant AS tenant, o.fraction AS fraction, o.start_ts AS start_ts,
       u.util_mean AS util_mean
FROM open AS o
LEFT JOIN util AS u
    ON u.cluster = o.cluster AND u.job_id = o.job_id AND u.attempt = o.attempt
   AND u.gpu_uuid = o.gpu_uuid AND u.mig_instance = o.mig_instance
ORDER BY cluster, tenant, job_id, gpu_uuid, mig_instance
