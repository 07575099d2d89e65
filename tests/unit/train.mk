# tests for train
