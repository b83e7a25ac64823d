-- Every allocation interval overlapping [a, b), clipped to it, with the GPU-hours it held and
-- the GPU-hours it used and left idle.
--
-- used: the interval's share of the GPU x the GPU's mean utilisation, minute by minute.
-- idle: the interval's share x the minutes that belong to an idle run: consecutive minutes
--       whose every sample stayed under {threshold}, under the same job label, lasting at
--       least {min_idle_s} seconds. Runs are found on [a - min_idle, b + min_idle), so that a
--       run crossing the window's edge is judged by its whole length: splitting the window
--       never changes the figures.
-- Both come from prefix sums over each GPU's minutes, read at the interval's two ends (one
-- ASOF join over both ends; partial minutes at the ends count pro rata).
WITH
    minutes AS (
        {{minutes}}
    ),
    flagged AS (
        SELECT *,
               umax IS NOT NULL AND umax < {threshold:Float64} AS low,
               low AND lagInFrame(low, 1, false) OVER w AND lagInFrame(holder, 1, '') OVER w = holder
                   AND dateDiff('second', lagInFrame(m, 1, m) OVER w, m) = 60 AS continues
        FROM minutes
        WINDOW w AS (PARTITION BY cluster, gpu_uuid, mig_instance ORDER BY m
                     ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    ),
    runs AS (
        SELECT *, sum(NOT continues) OVER (PARTITION BY cluster, gpu_uuid, mig_instance
                                           ORDER BY m ROWS UNBOUNDED PRECEDING) AS run
        FROM flagged
    ),
    sized AS (
        SELECT *, count() OVER (PARTITION BY cluster, gpu_uuid, mig_instance, run) AS run_minutes
        FROM runs
    ),
    cum AS (
        SELECT cluster, gpu_uuid, mig_instance, m,
               coalesce(util, 0) / 60 AS used_h,
               if(low AND run_minutes * 60 >= {min_idle_s:UInt32}, 1 / 60, 0) AS idle_h,
               sum(used_h) OVER g AS used_cum,
               sum(idle_h) OVER g AS idle_cum
        FROM sized
        WINDOW g AS (PARTITION BY cluster, gpu_uuid, mig_instance ORDER BY m
                     ROWS UNBOUNDED PRECEDING)
    ),
    allocs AS (
        SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant,
               org, project, user, queue, workload_type, fraction, end_event,
               greatest(start_ts, {a:DateTime64(3)}) AS s,
               least(coalesce(end_ts, {b:DateTime64(3)}), {b:DateTime64(3)}) AS e
        FROM {db:Identifier}.allocations FINAL
        WHERE (cluster = {cluster:String} OR {cluster:String} = '')
          AND start_ts < {b:DateTime64(3)}
          AND coalesce(end_ts, {b:DateTime64(3)}) > {a:DateTime64(3)}
    ),
    ends AS (
        SELECT cluster, job_id, attempt, gpu_uuid, mig_instance, s AS t, -1 AS sign FROM allocs
        UNION ALL
        SELECT cluster, job_id, attempt, gpu_uuid, mig_instance, e AS t, 1 AS sign FROM allocs
    ),
    at_ends AS (
        SELECT x.cluster AS cluster, x.job_id AS job_id, x.attempt AS attempt,
               x.gpu_uuid AS gpu_uuid, x.mig_instance AS mig_instance,
               sum(x.sign * if(c.m = toStartOfMinute(x.t),
                   c.used_cum - c.used_h + c.used_h * dateDiff('millisecond', c.m, x.t) / 60000,
                   c.used_cum)) AS used_h,
               sum(x.sign * if(c.m = toStartOfMinute(x.t),
                   c.idle_cum - c.idle_h + c.idle_h * dateDiff('millisecond', c.m, x.t) / 60000,
                   c.idle_cum)) AS idle_h
        FROM ends AS x
        ASOF LEFT JOIN cum AS c
            ON x.cluster = c.cluster AND x.gpu_uuid = c.gpu_uuid
               AND x.mig_instance = c.mig_instance AND x.t >= c.m
        GROUP BY cluster, job_id, attempt, gpu_uuid, mig_instance
    )
SELECT a.cluster AS cluster, a.pool AS pool, a.node AS node, a.gpu_uuid AS gpu_uuid,
       a.mig_instance AS mig_instance, a.gpu_model AS gpu_model, a.job_id AS job_id,
       a.attempt AS attempt, a.tenant AS tenant, a.org AS org, a.project AS project,
       a.user AS user, a.queue AS queue, a.workload_type AS workload_type,
       a.end_event AS end_event, a.fraction AS fraction, a.s AS s, a.e AS e,
       toFloat64(a.fraction) * dateDiff('millisecond', a.s, a.e) AS allocated_gpu_ms,
       if(a.gpu_uuid = '', NULL, toFloat64(a.fraction) * coalesce(u.used_h, 0)) AS used_gpu_hours,
       if(a.gpu_uuid = '', NULL, toFloat64(a.fraction) * coalesce(u.idle_h, 0)) AS idle_gpu_hours
FROM allocs AS a
LEFT JOIN at_ends AS u
    ON a.cluster = u.cluster AND a.job_id = u.job_id AND a.attempt = u.attempt
       AND a.gpu_uuid = u.gpu_uuid AND a.mig_instance = u.mig_instance
WHERE a.e > a.s
