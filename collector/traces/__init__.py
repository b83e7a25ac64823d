"""collector.traces."""
