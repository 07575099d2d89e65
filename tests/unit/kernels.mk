# tests for kernels
