# tests for ckpt
