-- The rows of one replaced seal of one day. The ON CLUSTER clause is the only part not passed as
-- a parameter: ClickHouse's parser takes no parameter after ON CLUSTER, and the name comes from
-- warehouse.cluster, which the settings accept only as a plain identifier.
DELETE FROM {db:Identifier}.{table:Identifier}{{on_cluster}}
WHERE day = {day:Date} AND seal_id = {seal_id:UInt64}
