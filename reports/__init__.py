"""Chargeback reports and idle-GPU alerts (planned): consumers of the ledger's public API."""
