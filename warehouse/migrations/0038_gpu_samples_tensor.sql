-- Tensor-pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, 0-1), which shows whether a busy GPU
-- runs its tensor cores; NULL where the source has no profiling metrics (NVML, or older rows).
-- Re-running it changes nothing.
ALTER TABLE {{db}}.gpu_samples{{local}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS tensor_active_ratio Nullable(Float32) AFTER sm_clock_mhz
