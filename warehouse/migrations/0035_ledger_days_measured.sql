-- The measured GPU-hours of each sealed usage row (held in minutes with a utilisation sample;
-- the rest of the row's allocated hours are unmeasured). Rows sealed before this column
-- existed read NULL here, and the ledger counts them as measured, as it did when they were
-- sealed. Re-running it changes nothing.
ALTER TABLE {{db}}.ledger_days{{local}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS measured_gpu_hours Nullable(Float64) AFTER used_gpu_hours
