-- Quarantined rows by kind and reason: how many are still quarantined, how many a replay has
-- written since, and the newest. Filters: kind ('' = any), a piece of the reason ('' = any,
-- case-insensitive), received since.
SELECT
    kind,
    reason,
    countIf(NOT is_replayed) AS quarantined,
    countIf(is_replayed) AS replayed,
    max(received_at) AS newest
FROM
(
    SELECT
        kind,
        reason,
        received_at,
        sipHash64(received_at, source, kind, batch_id, field, value, reason, payload)
            GLOBAL IN (SELECT quarantine_id FROM {db:Identifier}.quarantine_replays) AS is_replayed
    FROM {db:Identifier}.quarantine
    WHERE ({kind:String} = '' OR kind = {kind:String})
      AND ({reason:String} = '' OR positionCaseInsensitiveUTF8(reason, {reason:String}) > 0)
      AND received_at >= {since:DateTime64(3, 'UTC')}
)
GROUP BY kind, reason
ORDER BY quarantined DESC, replayed DESC, kind, reason
