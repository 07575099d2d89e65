# tests for launcher
