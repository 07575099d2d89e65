# bench: sources are added here.
