-- Each GPU's (or MIG slice's) inventory states clipped to [a, b): a state lasts until the
-- GPU's next reported state. Retired GPUs hold no capacity. capacity_gpu_ms counts the slice's
-- share of its physical GPU.
SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, health,
       greatest(s, {a:DateTime64(3)}) AS cs, least(e, {b:DateTime64(3)}) AS ce,
       toFloat64(capacity_fraction) * dateDiff('millisecond', cs, ce) AS capacity_gpu_ms
FROM (
    SELECT cluster, pool, node, gpu_uuid, mig_instance, gpu_model, health, capacity_fraction,
           ts AS s,
           leadInFrame(ts, 1, toDateTime64('2200-01-01 00:00:00', 3, 'UTC')) OVER (
               PARTITION BY cluster, gpu_uuid, mig_instance ORDER BY ts
               ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS e
    FROM {db:Identifier}.gpu_inventory_log
    WHERE (cluster = {cluster:String} OR {cluster:String} = '') AND ts < {b:DateTime64(3)}
)
WHERE health != 'retired' AND s < {b:DateTime64(3)} AND e > {a:DateTime64(3)}
