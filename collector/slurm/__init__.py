"""collector.slurm."""
