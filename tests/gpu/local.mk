# tests/gpu: sources are added here.
