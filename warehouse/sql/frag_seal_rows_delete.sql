-- The rows of one replaced seal of one day in frag_hours or frag_hour_tenants. The ON CLUSTER
-- clause is the only part not passed as a parameter (see ledger_days_delete.sql).
DELETE FROM {db:Identifier}.{table:Identifier}{{on_cluster}}
WHERE day = {day:Date} AND seal_id = {seal_id:UInt64}
