# spank: sources are added here.
