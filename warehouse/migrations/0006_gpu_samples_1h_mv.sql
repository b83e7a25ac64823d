-- Maintains gpu_samples_1h from every insert into gpu_samples.
-- Rows older than the raw retention never get here: ingest quarantines them first, so that the
-- rollups never hold data the raw table dropped at insert.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.gpu_samples_1h_mv${local} ${on_cluster}
TO ${db}.gpu_samples_1h${local}
AS SELECT
    toStartOfHour(ts) AS ts,
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
    count(xid) AS xid_samples,
    max(xid) AS xid_max
FROM ${db}.gpu_samples${local}
GROUP BY ts, cluster, gpu_uuid, mig_instance, namespace, pod, job_id
