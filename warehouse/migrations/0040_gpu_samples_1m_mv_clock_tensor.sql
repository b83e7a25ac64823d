-- Migration 4's view, now also summing the SM clock and tensor activity into the columns that
-- migration 39 added; minutes inserted before keep 0 there. Re-running it changes nothing.
ALTER TABLE {{db}}.gpu_samples_1m_mv{{local}} {{on_cluster}}
MODIFY QUERY SELECT
    toStartOfMinute(ts) AS ts,
    cluster, gpu_uuid, mig_instance, namespace, pod, job_id,
    max(node) AS node,
    max(gpu_model) AS gpu_model,
    count() AS samples,
    count(coalesce(gr_engine_active_ratio, gpu_util_ratio)) AS util_samples,
    sum(coalesce(gr_engine_active_ratio, gpu_util_ratio, 0)) AS util_ratio_sum,
    min(coalesce(gr_engine_active_ratio, gpu_util_ratio)) AS util_ratio_min,
    max(coalesce(gr_engine_active_ratio, gpu_util_ratio)) AS util_ratio_max,
    max(memory_used_bytes) AS memory_used_bytes_max,
    max(memory_total_bytes) AS memory_total_bytes_max,
    count(power_watts) AS power_samples,
    sum(coalesce(power_watts, 0)) AS power_watts_sum,
    min(energy_millijoules) AS energy_millijoules_min,
    max(energy_millijoules) AS energy_millijoules_max,
    max(temperature_celsius) AS temperature_celsius_max,
    count(sm_clock_mhz) AS sm_clock_samples,
    sum(coalesce(sm_clock_mhz, 0)) AS sm_clock_mhz_sum,
    count(tensor_active_ratio) AS tensor_samples,
    sum(coalesce(tensor_active_ratio, 0)) AS tensor_active_ratio_sum,
    count(xid) AS xid_samples,
    max(xid) AS xid_max
FROM {{db}}.gpu_samples{{local}}
GROUP BY ts, cluster, gpu_uuid, mig_instance, namespace, pod, job_id
