# templates: sources are added here.
