-- Quotas per cluster: a quota row names the cluster it applies in ('' = every cluster without
-- a row of its own for that tenant, pool and GPU model). Rows written before this migration
-- read as '' (a String's default). The column joins the end of the sorting key, the only
-- place ClickHouse lets a new column (without a default expression) enter it, so the same
-- tenant, pool and model in two clusters are two quotas. Re-running it changes nothing.
ALTER TABLE ${db}.quotas${local} ${on_cluster}
    ADD COLUMN IF NOT EXISTS cluster LowCardinality(String) AFTER effective_from,
    MODIFY ORDER BY (tenant, pool, gpu_model, effective_from, cluster)
