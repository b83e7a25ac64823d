"""Quota-reclaim advice, priority feedback and the admission webhook (planned): consumers of
the ledger's public API."""
