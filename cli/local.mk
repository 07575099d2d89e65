# cli: sources are added here.
