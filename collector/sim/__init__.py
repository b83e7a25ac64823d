"""collector.sim."""
