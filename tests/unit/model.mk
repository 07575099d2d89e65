# tests for model
