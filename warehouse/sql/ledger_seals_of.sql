-- The latest seal (see migrations/0031_ledger_seals.sql) of each day in [{day0}, {day1}) for one
-- idle threshold and minimum idle duration (argMax rather than FINAL, so that it holds across
-- shards too). cut is NULL for a whole day's seal, else where the sealed span [day, cut) ends.
SELECT day, argMax(seal_id, sealed_at) AS seal_id, argMax(samples_fp, sealed_at) AS samples_fp,
       argMax(allocs_fp, sealed_at) AS allocs_fp, argMax(usage_rows, sealed_at) AS usage_rows,
       -- (a tuple, as argMax skips NULL arguments)
       argMax(tuple(cut), sealed_at).1 AS cut
FROM {db:Identifier}.ledger_seals
WHERE idle_threshold_ratio = {threshold:Float64}
  AND idle_min_duration_s = {min_idle_s:UInt32}
  AND day >= {day0:Date} AND day < {day1:Date}
GROUP BY day
ORDER BY day
