# lib/optim: sources are added here.
