# lib/data: sources are added here.
