-- Where a cluster's sealed hours start: its first GPU inventory (before it nothing is
-- schedulable) or the task-mix window before its first job attempt started (before that every
-- hour strands nothing), whichever is later; NULL when it has neither. A cluster listed years
-- before its first job is not sampled hour by hour over those years.
SELECT if(inventory.n = 0 OR started.n = 0, NULL,
          greatest(inventory.first,
                   started.first - toIntervalMillisecond({window_ms:Int64}))) AS first
FROM (SELECT count() AS n, min(ts) AS first
      FROM {db:Identifier}.gpu_inventory_log WHERE cluster = {cluster:String}) AS inventory
CROSS JOIN
     (SELECT count() AS n, min(ts) AS first
      FROM {db:Identifier}.job_events
      WHERE cluster = {cluster:String} AND event = {event:String}) AS started
