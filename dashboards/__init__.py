"""The Dash app: a shell and pages that read the ledger's and analytics' public API."""
