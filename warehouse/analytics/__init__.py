"""Analytics: the ledger and what explains it."""
