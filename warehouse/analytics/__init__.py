"""Analytics beside the ledger: fragmentation (FGD, stranded GPUs), queues (waits, failures),
explanations of jobs, GPUs and tenants (``why``), and the fleet's hourly picture."""
