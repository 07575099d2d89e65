# tests for optim
