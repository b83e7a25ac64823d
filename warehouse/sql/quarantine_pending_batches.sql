-- The batches holding rows of one kind still to replay (not replayed yet), oldest first, with
-- how many rows each holds; same filters as quarantine_counts.
SELECT batch_id, count() AS rows
FROM {db:Identifier}.quarantine
WHERE kind = {kind:String}
  AND ({reason:String} = '' OR positionCaseInsensitiveUTF8(reason, {reason:String}) > 0)
  AND received_at >= {since:DateTime64(3, 'UTC')}
  AND sipHash64(received_at, source, kind, batch_id, field, value, reason, payload)
      GLOBAL NOT IN (SELECT quarantine_id FROM {db:Identifier}.quarantine_replays)
GROUP BY batch_id
ORDER BY min(received_at), batch_id
