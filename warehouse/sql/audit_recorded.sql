-- How many entries of the audit log are this one (0 or 1): a kept entry is written once.
SELECT count()
FROM {db:Identifier}.audit_log
WHERE ts = {ts:DateTime64(3, 'UTC')}
  AND actor = {actor:String}
  AND action = {action:String}
  AND object = {object:String}
  AND outcome = {outcome:String}
  AND detail = {detail:String}
