-- What an alert notice says beyond the first columns, so that the history answers on its own and
-- a restarted process rebuilds its open alerts from it: the stable key of the rule and subject
-- (alert_id names one firing of it, up to its resolution), the notice (fired, repeated after the
-- cooldown, resolved), since when the condition held, its cost so far and the currency, the
-- dashboard link, every GPU and job it names, and the finding itself as JSON. Re-running it
-- changes nothing.
ALTER TABLE {{db}}.alerts{{local}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS alert_key String AFTER alert_id,
    ADD COLUMN IF NOT EXISTS event LowCardinality(String) AFTER state,
    ADD COLUMN IF NOT EXISTS since Nullable(DateTime64(3, 'UTC')) AFTER threshold,
    ADD COLUMN IF NOT EXISTS cost Nullable(Decimal(18, 2)) AFTER since,
    ADD COLUMN IF NOT EXISTS currency LowCardinality(String) AFTER cost,
    ADD COLUMN IF NOT EXISTS url String AFTER message,
    ADD COLUMN IF NOT EXISTS gpus Array(String) AFTER url,
    ADD COLUMN IF NOT EXISTS jobs Array(String) AFTER gpus,
    ADD COLUMN IF NOT EXISTS details String AFTER notified
