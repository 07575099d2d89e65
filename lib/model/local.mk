# lib/model: sources are added here.
