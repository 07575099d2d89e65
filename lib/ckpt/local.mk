# lib/ckpt: sources are added here.
