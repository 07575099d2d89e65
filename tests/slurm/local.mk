# tests/slurm: sources are added here.
