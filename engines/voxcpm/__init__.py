"""VoxCPM2 voice cloning: the engine on PyTorch, its MLX backend and the import of the upstream package."""
