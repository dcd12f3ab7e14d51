"""Models: the bundled zoo and shapes read from Hugging Face configs."""
