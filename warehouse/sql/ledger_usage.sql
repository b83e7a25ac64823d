-- Every allocation interval overlapping [a, b), clipped to it, with the GPU-hours it held and
-- the GPU-hours it used and left idle.
--
-- used: the interval's share of the GPU x the GPU's mean utilisation, minute by minute.
-- idle: the interval's share x its idle time: the minutes of the GPU whose every sample stayed
--       under {threshold}, in runs that last at least {min_idle_s} seconds within the job's
--       own interval (a run is cut where the job starts or ends, so one job's idle stretch never
--       lends length to the next job's). A run is judged on the job's interval within
--       [lo, hi) = [a - min_idle - 1 min, b + min_idle + 1 min), so that a run crossing the
--       window's edge is judged by its whole length (or by enough of it): splitting the window
--       never changes the figures.
-- Partial minutes at an interval's ends count pro rata.
--
-- How: the minutes (ledger_minutes_*.sql) come as one row per GPU and hour. Per GPU:
--   U(t)  the used GPU-hours up to t: the hours ended by t, plus the minutes of t's own hour
--         before t (computed in that hour's row, joined with the interval ends in it);
--   runs  the GPU's low minutes joined into maximal runs (most hours are none or all low);
--   L(t)  the time up to t in runs at least {min_idle_s} long.
-- Each interval reads U and L at its ends [s, e), and the runs around the ends [js, je) of the
-- span it is judged on: a run that crosses js or je is judged by its part inside, not by its
-- whole length. Lookups are one sorted pass per GPU over its hours, runs and interval ends.
-- allocs and points, each read twice below, are MATERIALIZED (computed once) where the engine
-- has materialized CTEs (ClickHouse 26.3 on, enable_materialized_cte; warehouse/ledger/usage.py
-- asks); elsewhere they are inlined.
WITH
    hours AS (
        {{minutes}}
    ),
    allocs AS {{materialized}} (
        SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant,
               org, project, user, queue, workload_type, fraction, end_event,
               cityHash64(job_id, attempt) AS id,
               greatest(start_ts, {a:DateTime64(3)}) AS s,
               least(coalesce(end_ts, {b:DateTime64(3)}), {b:DateTime64(3)}) AS e,
               greatest(start_ts, {lo:DateTime64(3)}) AS js,
               least(coalesce(end_ts, {hi:DateTime64(3)}), {hi:DateTime64(3)}) AS je
        FROM {db:Identifier}.allocations FINAL
        WHERE (cluster = {cluster:String} OR {cluster:String} = '')
          AND start_ts < {b:DateTime64(3)}
          AND coalesce(end_ts, {b:DateTime64(3)}) > {a:DateTime64(3)}
    ),
    -- the interval's ends as points; which: bit 0 = s, 1 = e (where U and L are read), 2 = js,
    -- 3 = je (where runs are cut). js and je differ from s and e only at the window's edges.
    points AS {{materialized}} (
        SELECT cluster, gpu_uuid, mig_instance, id, p.1 AS t, p.2 AS which
        FROM allocs
        ARRAY JOIN arrayConcat(
            [(toUnixTimestamp64Milli(s), toUInt8(if(js = s, 5, 1))),
             (toUnixTimestamp64Milli(e), toUInt8(if(je = e, 10, 2)))],
            if(js = s, [], [(toUnixTimestamp64Milli(js), toUInt8(4))]),
            if(je = e, [], [(toUnixTimestamp64Milli(je), toUInt8(8))])) AS p
        WHERE gpu_uuid != '' AND e > s
    ),
    ends_by_hour AS (
        SELECT cityHash64(cluster, gpu_uuid, mig_instance, toInt64(intDiv(t, 3600000))) AS hk,
               groupArray((t, id, which)) AS xs
        FROM points WHERE bitAnd(which, 3) != 0
        GROUP BY hk
    ),
    hourly AS (
        SELECT cluster, gpu_uuid, mig_instance, toInt64(toUnixTimestamp(h)) * 1000 AS h_ms,
               used,
               -- low minutes that follow one another make a piece [start, end) in ms
               if(whole, [(h_ms, h_ms + 3600000)],
                  arrayMap((x, y) -> (h_ms + x * 60000, h_ms + (y + 1) * 60000),
                           arrayFilter((m, pm) -> m != pm + 1, lk,
                                       arrayPopBack(arrayPushFront(lk, 254))),
                           arrayFilter((m, nm) -> nm != m + 1, lk,
                                       arrayPopFront(arrayPushBack(lk, 254))))) AS pieces,
               -- the used GPU-hours of the hour before each interval end in it
               arrayMap(x -> (x.2, x.3, arraySum((m, v) -> v * least(1., greatest(0.,
                                  (x.1 - h_ms - m * 60000) / 60000.)), k, u) / 60), xs) AS within
        FROM (SELECT *, cityHash64(cluster, gpu_uuid, mig_instance,
                                toInt64(intDiv(toUnixTimestamp(h), 3600)))
                     AS hk FROM hours) AS hh
        LEFT JOIN ends_by_hour USING (hk)
    ),
    per_gpu AS (
        SELECT cluster, gpu_uuid, mig_instance, groupArray((h_ms + 3600000, used)) AS hour_ends,
               arraySort(groupArrayArray(pieces)) AS ps, groupArrayArray(within) AS wi
        FROM hourly
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    pts_by_gpu AS (
        SELECT cluster, gpu_uuid, mig_instance, groupArray((t, id, which)) AS pts
        FROM points
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    timelines AS (
        SELECT cluster, gpu_uuid, mig_instance, wi,
               -- runs: pieces that continue one another (one ends where the next starts)
               arrayFilter((p, q) -> p.1 != q.2, ps,
                           arrayPopBack(arrayPushFront(ps, (toInt64(0), toInt64(0))))).1 AS rs,
               arrayFilter((p, q) -> p.2 != q.1, ps,
                           arrayPopFront(arrayPushBack(ps, (toInt64(0), toInt64(0))))).2 AS re,
               arrayMap((x, y) -> toUInt8(y - x >= {min_idle_s:UInt32} * 1000), rs, re) AS lng,
               arrayMap((x, y, l) -> l * (y - x), rs, re, lng) AS long_ms,
               -- events by time: (t, kind, used GPU-hours, id, which, run start, end, long,
               -- long ms before the run); kind 0 an hour's end, 1 a run's start, 2 a point
               arraySort(x -> (x.1, x.2), arrayConcat(
                   arrayMap(x -> (x.1, toUInt8(0), x.2, toUInt64(0), toUInt8(0), toInt64(0),
                                  toInt64(0), toUInt8(0), toInt64(0)), hour_ends),
                   arrayMap((x, y, l, c, m) -> (x, toUInt8(1), 0., toUInt64(0), toUInt8(0), x,
                                                y, l, c - m), rs, re, lng,
                            arrayCumSum(long_ms), long_ms),
                   arrayMap(x -> (x.1, toUInt8(2), 0., x.2, x.3, toInt64(0), toInt64(0),
                                  toUInt8(0), toInt64(0)), pts))) AS ev,
               arrayCumSum(ev.3) AS used_before,
               -- the run that started last before each event (zeros before the first)
               arrayFill((r, f) -> f, arrayMap(x -> (x.6, x.7, x.8, x.9), ev),
                         arrayMap(x -> x.2 = 1, ev)) AS run
        FROM per_gpu RIGHT JOIN pts_by_gpu USING (cluster, gpu_uuid, mig_instance)
    ),
    -- per interval end: (id, which, used GPU-hours before it, long ms before it, its run)
    at_points AS (
        SELECT cluster, gpu_uuid, mig_instance, x.1 AS id, x.2 AS which, x.3 AS used_h,
               x.4 AS long_ms, x.5 AS rs, x.6 AS re, x.7 AS lng
        FROM timelines
        ARRAY JOIN arrayConcat(
            arrayMap((x, u, r) -> (x.4, x.5, u,
                                   r.4 + r.3 * least(greatest(x.1 - r.1, 0), r.2 - r.1),
                                   r.1, r.2, r.3),
                     arrayFilter((x, f) -> f, ev, arrayMap(x -> x.2 = 2, ev)),
                     arrayFilter((u, f) -> f, used_before, arrayMap(x -> x.2 = 2, ev)),
                     arrayFilter((r, f) -> f, run, arrayMap(x -> x.2 = 2, ev))),
            arrayMap(w -> (w.1, w.2, w.3, toInt64(0), toInt64(0), toInt64(0), toUInt8(0)), wi))
            AS x
    ),
    per_alloc AS (
        SELECT cluster, gpu_uuid, mig_instance, id,
               sumIf(used_h, bitTest(which, 1)) - sumIf(used_h, bitTest(which, 0)) AS used_h,
               sumIf(long_ms, bitTest(which, 1)) - sumIf(long_ms, bitTest(which, 0)) AS long_ms,
               maxIf(rs, bitTest(which, 2)) AS rs_j, maxIf(re, bitTest(which, 2)) AS re_j,
               maxIf(lng, bitTest(which, 2)) AS lng_j,
               maxIf(rs, bitTest(which, 3)) AS rs_k, maxIf(re, bitTest(which, 3)) AS re_k,
               maxIf(lng, bitTest(which, 3)) AS lng_k
        FROM at_points
        GROUP BY cluster, gpu_uuid, mig_instance, id
    ),
    -- each interval's idle ms: L(e) - L(s), the runs crossing js and je judged by their part
    -- inside [js, je)
    judged AS (
        SELECT *, toUnixTimestamp64Milli(s) AS s_ms, toUnixTimestamp64Milli(e) AS e_ms,
               toUnixTimestamp64Milli(js) AS js_ms, toUnixTimestamp64Milli(je) AS je_ms,
               rs_j < js_ms AND re_j > js_ms AS cross_j,
               rs_k < je_ms AND re_k > je_ms AS cross_k,
               cross_j AND cross_k AND rs_j = rs_k AS one_run,
               if(cross_j, (toInt64(least(re_j, je_ms) - js_ms >= {min_idle_s:UInt32} * 1000)
                            - lng_j) * greatest(0, least(re_j, e_ms) - greatest(rs_j, s_ms)), 0)
               + if(cross_k AND NOT one_run,
                    (toInt64(je_ms - greatest(rs_k, js_ms) >= {min_idle_s:UInt32} * 1000)
                     - lng_k) * greatest(0, least(re_k, e_ms) - greatest(rs_k, s_ms)), 0)
               + long_ms AS idle_ms
        FROM allocs
        LEFT JOIN per_alloc USING (cluster, gpu_uuid, mig_instance, id)
        WHERE e > s
    )
SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant, org,
       project, user, queue, workload_type, end_event, fraction, s, e,
       toFloat64(fraction) * dateDiff('millisecond', s, e) AS allocated_gpu_ms,
       if(gpu_uuid = '', NULL, toFloat64(fraction) * used_h) AS used_gpu_hours,
       if(gpu_uuid = '', NULL, toFloat64(fraction) * idle_ms / 3600000) AS idle_gpu_hours
FROM judged
SETTINGS join_use_nulls = 0
