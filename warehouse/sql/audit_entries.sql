-- The audit log, newest first: entries at or after `since`, by `who` and `action` when given
-- ('' matches all), at most `limit` of them.
SELECT ts, actor, action, object, outcome, detail
FROM {db:Identifier}.audit_log
WHERE ts >= {since:DateTime64(3, 'UTC')}
  AND ({who:String} = '' OR actor = {who:String})
  AND ({action:String} = '' OR action = {action:String} OR startsWith(action, {prefix:String}))
ORDER BY ts DESC
LIMIT {limit:UInt32}
