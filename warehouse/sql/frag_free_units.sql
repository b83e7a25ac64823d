-- The free state of a cluster at each instant t_i = start + i * step_ms (i < n): every
-- schedulable GPU (or MIG slice) with its capacity and the share that jobs hold at t_i.
-- Schedulable: the GPU's latest inventory row with ts <= t_i says healthy, and its node's latest
-- state with ts <= t_i is ready (a node that never reported a state counts as ready).
-- held: the shares of the allocations open at t_i (start_ts <= t_i < coalesce(end_ts, +inf));
-- holders: (tenant, share) of each of them. Unplaced allocations (gpu_uuid '') are not here.
-- The latest rows come from ASOF joins, and each allocation is expanded only over the instants
-- it covers, so the cost grows with GPUs x instants, not with the length of the history.
WITH
    steps AS (
        SELECT {start:DateTime64(3, 'UTC')} + toIntervalMillisecond(i * {step_ms:UInt64}) AS t
        FROM (SELECT arrayJoin(range({n:UInt32})) AS i)
    ),
    gpu_log AS (
        SELECT gpu_uuid, mig_instance, ts, node, pool, gpu_model,
               toFloat64(capacity_fraction) AS capacity, health
        FROM {db:Identifier}.gpu_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {last:DateTime64(3, 'UTC')}
    ),
    inventory AS (
        SELECT grid.t AS t, grid.gpu_uuid AS gpu_uuid, grid.mig_instance AS mig_instance,
               g.node AS node, g.pool AS pool, g.gpu_model AS gpu_model, g.capacity AS capacity,
               g.health AS health
        FROM (SELECT k.gpu_uuid AS gpu_uuid, k.mig_instance AS mig_instance, s.t AS t
              FROM (SELECT DISTINCT gpu_uuid, mig_instance FROM gpu_log) AS k
              CROSS JOIN steps AS s) AS grid
        ASOF INNER JOIN gpu_log AS g
            ON g.gpu_uuid = grid.gpu_uuid AND g.mig_instance = grid.mig_instance
               AND g.ts <= grid.t
    ),
    node_log AS (
        SELECT node, ts, state
        FROM {db:Identifier}.node_inventory_log
        WHERE cluster = {cluster:String} AND ts <= {last:DateTime64(3, 'UTC')}
    ),
    node_state AS (
        SELECT grid.t AS t, grid.node AS node, l.state AS state
        FROM (SELECT k.node AS node, s.t AS t
              FROM (SELECT DISTINCT node FROM node_log) AS k CROSS JOIN steps AS s) AS grid
        ASOF INNER JOIN node_log AS l ON l.node = grid.node AND l.ts <= grid.t
    ),
    held AS (
        SELECT {start:DateTime64(3, 'UTC')} + toIntervalMillisecond(i * {step_ms:UInt64}) AS t,
               gpu_uuid, mig_instance, sum(fraction) AS held,
               groupArray((tenant, fraction)) AS holders
        FROM (
            SELECT gpu_uuid, mig_instance, tenant, toFloat64(fraction) AS fraction,
                   toInt64(greatest({step_ms:UInt64}, 1)) AS step,
                   toUnixTimestamp64Milli(start_ts)
                       - toUnixTimestamp64Milli({start:DateTime64(3, 'UTC')}) AS from_ms,
                   toUnixTimestamp64Milli(end_ts)
                       - toUnixTimestamp64Milli({start:DateTime64(3, 'UTC')}) AS to_ms,
                   if(from_ms <= 0, 0, intDiv(from_ms + step - 1, step)) AS first,
                   if(end_ts IS NULL, {n:UInt32} - 1,
                      least({n:UInt32} - 1, intDiv(assumeNotNull(to_ms) + step - 1, step) - 1))
                       AS last
            FROM {db:Identifier}.allocations FINAL
            WHERE cluster = {cluster:String} AND gpu_uuid != ''
              AND start_ts <= {last:DateTime64(3, 'UTC')}
              AND (end_ts IS NULL OR end_ts > {start:DateTime64(3, 'UTC')})
        )
        ARRAY JOIN range(toUInt32(first), toUInt32(greatest(last + 1, first))) AS i
        GROUP BY t, gpu_uuid, mig_instance
    )
SELECT i.t AS ts, i.node AS node, i.pool AS pool, i.gpu_model AS gpu_model,
       i.gpu_uuid AS gpu_uuid, i.mig_instance AS mig_instance, i.capacity AS capacity,
       h.held AS held, h.holders AS holders
FROM inventory AS i
LEFT JOIN node_state AS ns ON ns.t = i.t AND ns.node = i.node
LEFT JOIN held AS h ON h.t = i.t AND h.gpu_uuid = i.gpu_uuid AND h.mig_instance = i.mig_instance
WHERE i.health = 'healthy' AND ns.state IN ('ready', '')
ORDER BY ts, node, gpu_uuid, mig_instance
