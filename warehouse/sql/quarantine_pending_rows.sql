-- The rows of one kind still to replay in the given batches, each with its id: sipHash64 of all
-- its columns (rows that are identical in every column are one row). Same filters as
-- quarantine_counts.
SELECT
    sipHash64(received_at, source, kind, batch_id, field, value, reason, payload) AS quarantine_id,
    received_at, source, batch_id, field, value, reason, payload
FROM {db:Identifier}.quarantine
WHERE kind = {kind:String}
  AND batch_id IN {batch_ids:Array(String)}
  AND ({reason:String} = '' OR positionCaseInsensitiveUTF8(reason, {reason:String}) > 0)
  AND received_at >= {since:DateTime64(3, 'UTC')}
  AND quarantine_id GLOBAL NOT IN (SELECT quarantine_id FROM {db:Identifier}.quarantine_replays)
ORDER BY received_at, batch_id, quarantine_id
LIMIT 1 BY quarantine_id
