-- Every allocation interval overlapping [a, b), clipped to it, with the GPU-hours it held and
-- the GPU-hours it used and left idle.
--
-- used: the interval's share of the GPU x the GPU's mean utilisation, minute by minute.
-- idle: the interval's share x the minutes that belong to an idle run: consecutive minutes
--       whose every sample stayed under {threshold}, under the same job label, lasting at
--       least {min_idle_s} seconds. Runs are found on the hours around [lo, hi) =
--       [a - min_idle - 1 min, b + min_idle + 1 min), so that a run crossing the window's edge
--       is judged by its whole length (or by enough of it): splitting the window never changes
--       the figures.
-- Partial minutes at an interval's ends count pro rata.
--
-- How: the minutes (ledger_minutes_*.sql) come as one row per GPU and hour. Each hour becomes
-- a few events on its GPU's timeline (times in ms):
--   kind 0  the hour's used GPU-hours, at the hour's end;
--   kind 1  an allocation end in the hour (an interval's start counts -1, its end +1), with
--           the used GPU-hours from the hour's start to it;
--   kind 2  a piece: consecutive low minutes under one label within the hour, [t, piece_end).
-- Each GPU's events, in time order, are processed as arrays: pieces that continue one another
-- across hours join into runs, runs long enough are idle, and each end reads the used and idle
-- GPU-hours before it; an interval's figures are the sum over its two ends.
WITH
    hours AS (
        {{minutes}}
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
        SELECT cluster, gpu_uuid, mig_instance, toDateTime(toStartOfHour(t), 'UTC') AS h,
               groupArray((toUnixTimestamp64Milli(t), job_id, attempt, sign)) AS xs
        FROM (
            SELECT cluster, gpu_uuid, mig_instance, job_id, attempt, s AS t, toInt8(-1) AS sign
            FROM allocs WHERE gpu_uuid != '' AND e > s
            UNION ALL
            SELECT cluster, gpu_uuid, mig_instance, job_id, attempt, e AS t, toInt8(1) AS sign
            FROM allocs WHERE gpu_uuid != '' AND e > s
        )
        GROUP BY cluster, gpu_uuid, mig_instance, h
    ),
    hourly AS (
        SELECT cluster, gpu_uuid, mig_instance,
               toInt64(toUnixTimestamp(h)) * 1000 AS h_ms,
               if(whole, [(toUInt8(0), toUInt8(59), toUInt8(1))],
                  arrayMap((a, b, l) -> (a, b, l),
                           arrayFilter((m, f) -> f, lk, starts),
                           arrayFilter((m, f) -> f, lk, arrayPopFront(arrayPushBack(starts, 1))),
                           arrayFilter((l, f) -> f, lr, starts))) AS pieces,
               arrayConcat(
                   if(used > 0, [(h_ms + 3600000, toUInt8(0), used, toInt64(0), '',
                                  toUInt16(0), toInt8(0))], []),
                   arrayMap(y -> (y.1, toUInt8(1),
                                  arraySum((m, v) -> v * least(1., greatest(0.,
                                      (y.1 - h_ms - m * 60000) / 60000.)), k, u) / 60,
                                  toInt64(0), y.2, y.3, y.4), xs),
                   arrayMap(p -> (h_ms + p.1 * 60000, toUInt8(2), 0., h_ms + (p.2 + 1) * 60000,
                                  hl[p.3], toUInt16(0), toInt8(0)), pieces)) AS events
        FROM (
            SELECT *,
                   -- a low minute starts a piece unless it follows the previous one directly
                   -- under the same label
                   -- (no `if`: lk is empty where there is nothing to do, and a lazily
                   -- evaluated branch costs more than the empty arrays)
                   arrayMap((m, l, pm, pl, i) -> i = 1 OR m != pm + 1 OR l != pl,
                            lk, lr, arrayPopBack(arrayPushFront(lk, 0)),
                            arrayPopBack(arrayPushFront(lr, 0)), arrayEnumerate(lk)) AS starts
            FROM hours FULL OUTER JOIN ends USING (cluster, gpu_uuid, mig_instance, h)
        )
    ),
    timelines AS (
        SELECT cluster, gpu_uuid, mig_instance,
               arraySort(x -> (x.1, x.2), groupArrayArray(events)) AS ev,
               ev.1 AS t, ev.2 AS kind, ev.4 AS piece_end, ev.5 AS label,
               arrayMap(q -> q = 2, kind) AS piece,
               -- the previous piece's end and label, carried over the events in between
               arrayPopBack(arrayPushFront(arrayFill((x, f) -> f,
                   arrayMap((x, f) -> if(f, x, 0), piece_end, piece), piece), 0)) AS prev_end,
               arrayPopBack(arrayPushFront(arrayFill((x, f) -> f,
                   arrayMap((x, f) -> if(f, x, ''), label, piece), piece), '')) AS prev_label,
               arrayMap((f, x, pe, l, pl) -> f AND pe = x AND l = pl,
                        piece, t, prev_end, label, prev_label) AS continues,
               -- does the next piece continue this one?
               arrayPopFront(arrayPushBack(arrayReverseFill((c, f) -> f, continues, piece), 0))
                   AS continued,
               -- each run's first start and last end, spread over its pieces
               arrayFill((x, f) -> f, arrayMap((x, f, c) -> if(f AND NOT c, x, 0), t, piece,
                                               continues),
                         arrayMap((f, c) -> f AND NOT c, piece, continues)) AS run_start,
               arrayReverseFill((x, f) -> f, arrayMap((x, f, c) -> if(f AND NOT c, x, 0),
                                                      piece_end, piece, continued),
                                arrayMap((f, c) -> f AND NOT c, piece, continued)) AS run_end,
               arrayMap((f, rs, re) -> f AND re - rs >= {min_idle_s:UInt32} * 1000,
                        piece, run_start, run_end) AS idle,
               -- idle ms and used GPU-hours up to each event
               arrayCumSum(arrayMap((f, x, pe) -> if(f, pe - x, 0), idle, t, piece_end))
                   AS idle_ms,
               arrayFill((x, f) -> f, arrayMap((f, pe) -> if(f, pe, 0), idle, piece_end), idle)
                   AS idle_end,
               arrayCumSum(arrayMap((q, v) -> if(q = 0, v, 0.), kind, ev.3)) AS used_before
        FROM hourly
        GROUP BY cluster, gpu_uuid, mig_instance
    ),
    at_ends AS (
        SELECT cluster, gpu_uuid, mig_instance, x.1 AS job_id, x.2 AS attempt,
               sum(x.3 * x.4) AS used_h, sum(x.3 * x.5) / 3600000 AS idle_h
        FROM timelines
        ARRAY JOIN arrayFilter((y, q) -> q = 1, arrayMap(
            (l, at, sg, ub, v, im, ie, x) -> (l, at, sg, ub + v, im - greatest(0, ie - x)),
            label, ev.6, ev.7, used_before, ev.3, idle_ms, idle_end, t), kind) AS x
        GROUP BY cluster, gpu_uuid, mig_instance, job_id, attempt
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
SETTINGS allow_deprecated_error_prone_window_functions = 1, optimize_aggregation_in_order = 1
