-- Where a seal's span ends: a seal of today's finished hours covers [day, cut) and is replaced as
-- hours close, until the whole day is sealed. NULL (every seal written before this column, and
-- every whole day's) means the day's end. Re-running it changes nothing.
ALTER TABLE {{db}}.ledger_seals{{local}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS cut Nullable(DateTime64(3, 'UTC')) AFTER usage_rows
