-- Every tenant ("org/project") the warehouse names: in the tenants table or on a job.
SELECT DISTINCT tenant
FROM
(
    SELECT tenant FROM {db:Identifier}.tenants FINAL
    UNION ALL
    SELECT DISTINCT tenant FROM {db:Identifier}.jobs
)
WHERE tenant != ''
ORDER BY tenant
