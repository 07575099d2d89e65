# tests for spank
