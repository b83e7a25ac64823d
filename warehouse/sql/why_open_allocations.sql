-- The allocations open at `at` (start_ts <= at < coalesce(end_ts, +inf)), of one tenant or of
-- all ('' = all), each with its GPU's utilisation over the last `util_window_s` seconds before
-- `at` (not before the allocation started), from the 1-minute rollup:
-- util_mean = mean of the samples (NULL without samples), util_max = the busiest sample.
WITH
    open AS (
        SELECT job_id, attempt, tenant, pool, gpu_model, node, gpu_uuid, mig_instance,
               toFloat64(fraction) AS fraction, start_ts,
               greatest(start_ts, {at:DateTime64(3, 'UTC')}
                        - toIntervalSecond({util_window_s:UInt32})) AS util_from
        FROM {db:Identifier}.allocations FINAL
        WHERE cluster = {cluster:String} AND start_ts <= {at:DateTime64(3, 'UTC')}
          AND (end_ts IS NULL OR end_ts > {at:DateTime64(3, 'UTC')})
          AND ({tenant:String} = '' OR tenant = {tenant:String})
    ),
    util AS (
        SELECT o.job_id AS job_id, o.attempt AS attempt, o.gpu_uuid AS gpu_uuid,
               o.mig_instance AS mig_instance,
               sum(r.util_ratio_sum) / nullIf(sum(r.util_samples), 0) AS util_mean,
               max(r.util_ratio_max) AS util_max
        FROM open AS o
        INNER JOIN {db:Identifier}.gpu_samples_1m AS r
            ON r.gpu_uuid = o.gpu_uuid AND r.mig_instance = o.mig_instance
        WHERE r.cluster = {cluster:String}
          AND toDateTime64(r.ts, 3, 'UTC') >= toStartOfMinute(o.util_from)
          AND toDateTime64(r.ts, 3, 'UTC') < {at:DateTime64(3, 'UTC')}
          -- every allocation's util_from is at most util_window_s before `at`: only those
          -- minutes of the rollup are read, not its whole history
          AND r.ts >= toStartOfMinute({at:DateTime64(3, 'UTC')}
                                      - toIntervalSecond({util_window_s:UInt32}))
        GROUP BY job_id, attempt, gpu_uuid, mig_instance
    )
SELECT o.job_id AS job_id, o.attempt AS attempt, o.tenant AS tenant, o.pool AS pool,
       o.gpu_model AS gpu_model, o.node AS node, o.gpu_uuid AS gpu_uuid,
       o.mig_instance AS mig_instance, o.fraction AS fraction, o.start_ts AS start_ts,
       u.util_mean AS util_mean, u.util_max AS util_max
FROM open AS o
LEFT JOIN util AS u ON u.job_id = o.job_id AND u.attempt = o.attempt
    AND u.gpu_uuid = o.gpu_uuid AND u.mig_instance = o.mig_instance
ORDER BY tenant, pool, gpu_model, job_id, gpu_uuid
