# lib/train: sources are added here.
