-- How many usage rows the seals {seals} have in ledger_days over [{day0}, {day1}), whatever their
-- cluster: fewer than the seals recorded once a newer seal of a day deleted its old rows after
-- the reader had picked them (see analytics/seal.py).
SELECT count() AS rows
FROM {db:Identifier}.ledger_days
WHERE day >= {day0:Date} AND day < {day1:Date}
  AND has({seals:Array(UInt64)}, seal_id)
