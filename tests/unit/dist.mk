# tests for dist
