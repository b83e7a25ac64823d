-- The newest rows still quarantined (not replayed), with field, value and reason; same filters
-- as quarantine_counts.
SELECT received_at, kind, source, batch_id, field, value, reason, substring(payload, 1, 500) AS payload
FROM {db:Identifier}.quarantine
WHERE ({kind:String} = '' OR kind = {kind:String})
  AND ({reason:String} = '' OR positionCaseInsensitiveUTF8(reason, {reason:String}) > 0)
  AND received_at >= {since:DateTime64(3, 'UTC')}
  AND sipHash64(received_at, source, kind, batch_id, field, value, reason, payload)
      GLOBAL NOT IN (SELECT quarantine_id FROM {db:Identifier}.quarantine_replays)
ORDER BY received_at DESC, batch_id, field
LIMIT {limit:UInt32}
