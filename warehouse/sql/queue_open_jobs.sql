-- The jobs of {cluster} with an attempt still open at `end` (exclusive): one that has events
-- before `end` and none of them {leaving} (started or terminal). Every attempt that waits at an
-- instant before `end` is one of these jobs', so only these need the whole reading of
-- queue_attempts.sql (its `jobs`). A narrow pass over the events: job, attempt, event and time.
SELECT DISTINCT job_id
FROM (
    SELECT job_id, attempt
    FROM {db:Identifier}.job_events
    WHERE cluster = {cluster:String} AND ts < {end:DateTime64(3, 'UTC')}
    GROUP BY job_id, attempt
    HAVING NOT max(has({leaving:Array(String)}, event))
)
ORDER BY job_id
