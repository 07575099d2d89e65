# launcher: sources are added here.
