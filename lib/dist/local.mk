# lib/dist: sources are added here.
