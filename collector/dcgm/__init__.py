"""collector.dcgm."""
