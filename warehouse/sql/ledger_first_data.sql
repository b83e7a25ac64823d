-- The earliest sample-hour and the earliest allocation start (NULL where there is none): where
-- sealing the ledger's days begins.
SELECT (SELECT minOrNull(toDateTime64(ts, 3, 'UTC')) FROM {db:Identifier}.gpu_minutes_1h)
           AS first_hour,
       (SELECT minOrNull(start_ts) FROM {db:Identifier}.allocations) AS first_start
