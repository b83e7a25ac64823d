-- The latest seal (see migrations/0041_frag_seals.sql) of each day in [{day0}, {day1}) for one
-- cluster and setting of the measure (argMax rather than FINAL, so that it holds across shards).
SELECT day, argMax(seal_id, sealed_at) AS seal_id, argMax(last_ts, sealed_at) AS last_ts,
       argMax(fp, sealed_at) AS fp, argMax(series_rows, sealed_at) AS series_rows,
       argMax(tenant_rows, sealed_at) AS tenant_rows
FROM {db:Identifier}.frag_seals
WHERE cluster = {cluster:String} AND scope = {scope:String} AND window_s = {window_s:UInt32}
  AND mix_event = {event:String} AND day >= {day0:Date} AND day < {day1:Date}
GROUP BY day
ORDER BY day
