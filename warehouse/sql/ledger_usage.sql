-- Every allocation interval overlapping [a, b), clipped to it as [s, e), with the GPU-hours it
-- held, used, measured and left idle:
--   used  the interval's share of the GPU x the GPU's mean utilisation, minute by minute;
--   measured  its share x its time in minutes with a utilisation sample (the rest of what it
--         held is unmeasured: neither used nor idle is known there);
--   idle  its share x its time in idle runs: minutes of the GPU whose every sample stayed under
--         {threshold}, in runs of at least {min_idle_s} seconds within the job's own interval
--         (a run is cut where the job starts or ends, so one job's idle stretch never lends
--         length to the next job's).
-- Runs are judged on the interval clipped to [lo, hi) = [a - min_idle - 1 min, b + min_idle +
-- 1 min) rather than [a, b), so that a run crossing the window's edge is judged by its whole
-- length (or enough of it): splitting the window never changes the figures. Partial minutes at
-- an interval's ends count pro rata.
--
-- How: per GPU, three running totals are read at each interval's ends: U(t), the used GPU-hours
-- up to t, M(t), the measured time up to t, and L(t), the time up to t in runs at least
-- {min_idle_s} long; used = U(e) - U(s), measured = M(e) - M(s) and idle = L(e) - L(s), except
-- that a run crossing the judged span's ends is judged again by its part inside. U, M and L
-- are read in one sorted pass per GPU over its hours, runs and points.
-- `hours` is the costly part and is read once; allocs and points are read twice, and are
-- MATERIALIZED (computed once) where the engine has materialized CTEs.
WITH
    {min_idle_s:UInt32} * 1000 AS min_idle_ms,
    -- one row per GPU and hour: its used GPU-hours, its minutes, which of them were measured
    -- and which were low
    hours AS (
        {{minutes}}
    ),
    -- the intervals in the window: [s, e) clipped to [a, b), [js, je) to [lo, hi), in ms
    allocs AS {{materialized}} (
        SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant,
               org, project, user, queue, workload_type, fraction, end_event,
               cityHash64(job_id, attempt) AS id,
               greatest(start_ts, {a:DateTime64(3)}) AS s,
               least(coalesce(end_ts, {b:DateTime64(3)}), {b:DateTime64(3)}) AS e,
               toUnixTimestamp64Milli(s) AS s_ms, toUnixTimestamp64Milli(e) AS e_ms,
               toUnixTimestamp64Milli(greatest(start_ts, {lo:DateTime64(3)})) AS js_ms,
               toUnixTimestamp64Milli(least(coalesce(end_ts, {hi:DateTime64(3)}),
                                            {hi:DateTime64(3)})) AS je_ms
        FROM {db:Identifier}.allocations FINAL
        WHERE (cluster = {cluster:String} OR {cluster:String} = '')
          AND start_ts < {b:DateTime64(3)}
          AND coalesce(end_ts, {b:DateTime64(3)}) > {a:DateTime64(3)}
    ),
    -- each interval's ends on its GPU: `read` -1 at s, +1 at e (U and L are read there); `cut`
    -- -1 at js, +1 at je (runs are cut there); js and je differ from s and e only at the edges
    points AS {{materialized}} (
        SELECT cluster, gpu_uuid, mig_instance, id, p.t AS t, p.read AS read, p.cut AS cut
        FROM allocs
        ARRAY JOIN CAST(arrayConcat(
                            [(s_ms, -1, if(js_ms = s_ms, -1, 0)),
                             (e_ms, 1, if(je_ms = e_ms, 1, 0))],
                            if(js_ms = s_ms, [], [(js_ms, 0, -1)]),
                            if(je_ms = e_ms, [], [(je_ms, 0, 1)])),
                        'Array(Tuple(t Int64, read Int8, cut Int8))') AS p
        WHERE gpu_uuid != '' AND e > s
    ),
    -- the points where U is read, by GPU-hour (one hash of the GPU and hour joins faster)
    ends_by_hour AS (
        SELECT cityHash64(cluster, gpu_uuid, mig_instance, intDiv(t, 3600000)) AS hk,
               groupArray(CAST((t, id, read), 'Tuple(t Int64, id UInt64, read Int8)')) AS ends
        FROM points
        WHERE read != 0
        GROUP BY hk
    ),
    -- per GPU-hour: its low minutes as pieces [start, end) in ms, and U's and M's parts in
    -- the hour before each point in it (the minutes before the point, the one it falls in pro
    -- rata)
    hourly AS (
        SELECT cluster, gpu_uuid, mig_instance, h_ms, used, length(mk) / 60 AS measured,
               if(whole, [(h_ms, h_ms + 3600000)],
                  arrayMap((x, y) -> (h_ms + x * 60000, h_ms + (y + 1) * 60000),
                           arrayFilter((m, pm) -> m != pm + 1, lk,
                                       arrayPopBack(arrayPushFront(lk, 254))),
                           arrayFilter((m, nm) -> nm != m + 1, lk,
                                       arrayPopFront(arrayPushBack(lk, 254))))) AS pieces,
               arrayMap(x -> CAST((x.id, x.read, arraySum((m, v) -> v * least(1., greatest(0.,
                                      (x.t - h_ms - m * 60000) / 60000.)), k, u) / 60,
                                   arraySum(m -> least(1., greatest(0.,
                                      (x.t - h_ms - m * 60000) / 60000.)), mk) / 60),
                                  'Tuple(id UInt64, read Int8, used Float64, measured Float64)'),
                        ends) AS within
        FROM (SELECT *, toInt64(toUnixTimestamp(h)) * 1000 AS h_ms,
                     cityHash64(cluster, gpu_uuid, mig_instance, intDiv(h_ms, 3600000)) AS hk
              FROM hours) AS hh
        LEFT JOIN ends_by_hour USING (hk)
    ),
    -- per GPU: each hour's end, used and measured GPU-hours, the low pieces in time order,
    -- and `within`
    per_gpu AS (
        SELECT cluster, gpu_uuid, mig_instance,
               groupArray(CAST((h_ms + 3600000, used, measured),
                               'Tuple(t Int64, used Float64, measured Float64)')) AS hour_ends,
               CAST(arraySort(groupArrayArray(pieces)),
                    'Array(Tuple(start_ms Int64, end_ms Int64))') AS pieces,
               groupArrayArray(within) AS within
        FROM hourly
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    -- per GPU: its points
    pts_by_gpu AS (
        SELECT cluster, gpu_uuid, mig_instance,
               groupArray(CAST((t, id, read, cut),
                               'Tuple(t Int64, id UInt64, read Int8, cut Int8)')) AS pts
        FROM points
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    -- per GPU with points: its runs (a piece starts one unless the one before ends where it
    -- starts), whether each is long enough to be idle, and the idle ms in runs before it
    runs AS (
        SELECT cluster, gpu_uuid, mig_instance, hour_ends, within, pts,
               arrayFilter((s, prev_end) -> s != prev_end, pieces.start_ms,
                           arrayPopBack(arrayPushFront(pieces.end_ms, 0))) AS run_start,
               arrayFilter((e, next_start) -> e != next_start, pieces.end_ms,
                           arrayPopFront(arrayPushBack(pieces.start_ms, 0))) AS run_end,
               arrayMap((s, e) -> toUInt8(e - s >= min_idle_ms), run_start, run_end) AS run_long,
               arrayMap((s, e, l) -> l * (e - s), run_start, run_end, run_long) AS run_long_ms,
               arrayMap((c, m) -> c - m, arrayCumSum(run_long_ms), run_long_ms) AS long_before
        FROM per_gpu RIGHT JOIN pts_by_gpu USING (cluster, gpu_uuid, mig_instance)
    ),
    -- per GPU, its time line: hours' ends (kind 0), runs' starts (1) and points (2) by time,
    -- each with U, M and the run started last as of it (hours and runs first at equal times)
    timelines AS (
        SELECT cluster, gpu_uuid, mig_instance, within,
               arraySort(x -> (x.t, x.kind), CAST(arrayConcat(
                   arrayMap(h -> (h.t, 0, h.used, h.measured, (0, 0, 0, 0), (0, 0, 0)),
                            hour_ends),
                   arrayMap((s, e, l, b) -> (s, 1, 0., 0., (s, e, l, b), (0, 0, 0)),
                            run_start, run_end, run_long, long_before),
                   arrayMap(p -> (p.t, 2, 0., 0., (0, 0, 0, 0), (p.id, p.read, p.cut)), pts)),
                   'Array(Tuple(t Int64, kind UInt8, used Float64, measured Float64,
                                run Tuple(start_ms Int64, end_ms Int64, long UInt8,
                                          long_before Int64),
                                point Tuple(id UInt64, read Int8, cut Int8)))')) AS ev,
               arrayCumSum(ev.used) AS used_so_far,
               arrayCumSum(ev.measured) AS measured_so_far,
               arrayFill((r, kind) -> kind = 1, ev.run, ev.kind) AS last_run,
               arrayMap(kind -> kind = 2, ev.kind) AS is_point
        FROM runs
    ),
    -- per point: U and M from the hours ended by it, L, and the run around it; then U's and
    -- M's parts within the point's own hour, as rows of their own
    at_points AS (
        SELECT cluster, gpu_uuid, mig_instance, x.id AS id, x.read AS read, x.cut AS cut,
               x.used_h AS used_h, x.measured_h AS measured_h, x.long_ms AS long_ms, x.run AS run
        FROM timelines
        ARRAY JOIN CAST(arrayConcat(
            arrayMap((p, t, u, mh, r) -> (p.id, p.read, p.cut, u, mh,
                                          r.long_before
                                          + r.long * least(greatest(t - r.start_ms, 0),
                                                           r.end_ms - r.start_ms),
                                          (r.start_ms, r.end_ms, r.long)),
                     arrayFilter((x, f) -> f, ev.point, is_point),
                     arrayFilter((x, f) -> f, ev.t, is_point),
                     arrayFilter((x, f) -> f, used_so_far, is_point),
                     arrayFilter((x, f) -> f, measured_so_far, is_point),
                     arrayFilter((x, f) -> f, last_run, is_point)),
            arrayMap(w -> (w.id, w.read, 0, w.used, w.measured, 0, (0, 0, 0)), within)),
            'Array(Tuple(id UInt64, read Int8, cut Int8, used_h Float64, measured_h Float64,
                         long_ms Int64, run Tuple(start_ms Int64, end_ms Int64, long UInt8)))')
            AS x
    ),
    -- per interval: U(e) - U(s), M(e) - M(s), L(e) - L(s), and the runs around js and je
    per_alloc AS (
        SELECT cluster, gpu_uuid, mig_instance, id,
               sumIf(used_h, read = 1) - sumIf(used_h, read = -1) AS used_h,
               sumIf(measured_h, read = 1) - sumIf(measured_h, read = -1) AS measured_h,
               sumIf(long_ms, read = 1) - sumIf(long_ms, read = -1) AS long_ms,
               anyIf(run, cut = -1) AS run_js, anyIf(run, cut = 1) AS run_je
        FROM at_points
        GROUP BY cluster, gpu_uuid, mig_instance, id
    ),
    -- each interval's idle ms: L(e) - L(s), the runs crossing js and je judged again by their
    -- part inside [js, je) (once when one run crosses both)
    judged AS (
        SELECT *,
               run_js.start_ms < js_ms AND run_js.end_ms > js_ms AS cross_js,
               run_je.start_ms < je_ms AND run_je.end_ms > je_ms AS cross_je,
               cross_js AND cross_je AND run_js.start_ms = run_je.start_ms AS one_run,
               if(cross_js,
                  (toInt64(least(run_js.end_ms, je_ms) - js_ms >= min_idle_ms) - run_js.long)
                  * greatest(0, least(run_js.end_ms, e_ms) - greatest(run_js.start_ms, s_ms)),
                  0)
               + if(cross_je AND NOT one_run,
                    (toInt64(je_ms - greatest(run_je.start_ms, js_ms) >= min_idle_ms)
                     - run_je.long)
                    * greatest(0, least(run_je.end_ms, e_ms) - greatest(run_je.start_ms, s_ms)),
                    0)
               + long_ms AS idle_ms
        FROM allocs
        LEFT JOIN per_alloc USING (cluster, gpu_uuid, mig_instance, id)
        WHERE e > s
    )
SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt, tenant, org,
       project, user, queue, workload_type, end_event, fraction, s, e,
       toFloat64(fraction) * dateDiff('millisecond', s, e) AS allocated_gpu_ms,
       if(gpu_uuid = '', NULL, toFloat64(fraction) * used_h) AS used_gpu_hours,
       if(gpu_uuid = '', 0., toFloat64(fraction) * measured_h) AS measured_gpu_hours,
       if(gpu_uuid = '', NULL, toFloat64(fraction) * idle_ms / 3600000) AS idle_gpu_hours
FROM judged
SETTINGS join_use_nulls = 0
