"""Memory: the per-GPU memory of a run, and which GPUs hold it."""
