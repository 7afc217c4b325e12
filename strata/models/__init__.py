"""Model architectures, their hyperparameters, and loaders for GGUF files and Hugging Face checkpoints."""
