-- Per day d in [{d0}, {d1}) (days since 1970-01-01, UTC): fingerprints of what the day's usage
-- rows (sql/ledger_usage.sql on its span [d, u), u = min(d + 1, {until_ms}), all clusters) are
-- computed from, for ledger_seals. u is the day's end but on a day cut short (a seal of today's
-- finished hours, ending at {until_ms}).
--   samples_fp  the samples in the hours of gpu_minutes_1h that query reads:
--               [d - {margin_ms}, u + {margin_ms}), whole hours. Rollup rows only grow, so
--               a sum of counts changes with every late sample (and when retention drops
--               some), whatever the merges have done.
--   allocs_fp   the allocation intervals overlapping [d, u): a sum of hashes of every column
--               the day's rows are made of, with the interval clipped to the span it is judged
--               on, [d - {margin_ms}, u + {margin_ms}), so that a job ending after the day's
--               margin leaves the fingerprint as it was. On a day cut short, so does its
--               end_event (jobs end all day): a reader takes it from the rows after the cut.
-- A day with neither samples nor allocations is not listed.
WITH toInt64(86400000) AS day_ms
SELECT d, sum(n) AS samples_fp, sum(h) AS allocs_fp
FROM (
    SELECT d, n, toUInt64(0) AS h
    FROM (
        SELECT toInt64(toUnixTimestamp(ts)) * 1000 AS t, sum(samples) AS n
        FROM {db:Identifier}.gpu_minutes_1h
        WHERE ts >= fromUnixTimestamp64Milli({d0:Int64} * day_ms - {margin_ms:Int64}, 'UTC')
                    - INTERVAL 1 HOUR
          AND ts < fromUnixTimestamp64Milli(least({d1:Int64} * day_ms, {until_ms:Int64})
                                            + {margin_ms:Int64}, 'UTC')
        GROUP BY t
    )
    ARRAY JOIN range(greatest(intDiv(t - {margin_ms:Int64}, day_ms), {d0:Int64}),
                     least(intDiv(t + 3600000 + {margin_ms:Int64} - 1, day_ms),
                           {d1:Int64} - 1) + 1) AS d
    WHERE t < least((d + 1) * day_ms, {until_ms:Int64}) + {margin_ms:Int64}
    UNION ALL
    SELECT d, toUInt64(0) AS n,
           cityHash64(cluster, pool, node, gpu_uuid, mig_instance, gpu_model, job_id, attempt,
                      tenant, org, project, user, queue, workload_type, fraction,
                      if(u < (d + 1) * day_ms AND coalesce(en, u + {margin_ms:Int64} + 1)
                                                  > u + {margin_ms:Int64},
                         '', end_event),
                      greatest(st, d * day_ms - {margin_ms:Int64}),
                      least(coalesce(en, u + {margin_ms:Int64}), u + {margin_ms:Int64})) AS h
    FROM (
        SELECT *, toUnixTimestamp64Milli(start_ts) AS st, toUnixTimestamp64Milli(end_ts) AS en
        FROM {db:Identifier}.allocations FINAL
        WHERE start_ts < fromUnixTimestamp64Milli(least({d1:Int64} * day_ms, {until_ms:Int64}),
                                                  'UTC')
          AND coalesce(end_ts, fromUnixTimestamp64Milli({d1:Int64} * day_ms, 'UTC'))
              > fromUnixTimestamp64Milli({d0:Int64} * day_ms, 'UTC')
    )
    ARRAY JOIN range(greatest(intDiv(st, day_ms), {d0:Int64}),
                     least(coalesce(intDiv(en - 1, day_ms), {d1:Int64} - 1), {d1:Int64} - 1) + 1)
        AS d
    -- (u defined here is the one the hash reads: ClickHouse takes aliases from any clause)
    WHERE coalesce(en, st + 1) > st AND st < (least((d + 1) * day_ms, {until_ms:Int64}) AS u)
)
GROUP BY d
ORDER BY d
