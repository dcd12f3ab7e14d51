"""Hardware: the GPU catalog, browsing it, and reading local GPUs (the only NVML user)."""
