"""collector.kubernetes."""
