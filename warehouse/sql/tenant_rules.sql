-- The rules that map a namespace, label or Slurm account to a tenant (latest version of each).
SELECT kind, pattern, tenant, rank
FROM {db:Identifier}.tenant_rules FINAL
ORDER BY rank, kind, pattern
