# tests for data
