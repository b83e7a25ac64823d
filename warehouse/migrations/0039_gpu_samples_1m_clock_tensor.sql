-- Sums and counts of the SM clock and of tensor activity per minute, so that the GPU page draws
-- their means from the rollup (count 0: no sample had it, drawn as not reported). Minutes
-- rolled up before read 0 and 0 here. Re-running it changes nothing.
ALTER TABLE {{db}}.gpu_samples_1m{{local}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS sm_clock_samples SimpleAggregateFunction(sum, UInt64)
        AFTER temperature_celsius_max,
    ADD COLUMN IF NOT EXISTS sm_clock_mhz_sum SimpleAggregateFunction(sum, Float64)
        AFTER sm_clock_samples,
    ADD COLUMN IF NOT EXISTS tensor_samples SimpleAggregateFunction(sum, UInt64)
        AFTER sm_clock_mhz_sum,
    ADD COLUMN IF NOT EXISTS tensor_active_ratio_sum SimpleAggregateFunction(sum, Float64)
        AFTER tensor_samples
