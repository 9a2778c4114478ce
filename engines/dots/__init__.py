"""dots.tts voice cloning: the engine on PyTorch, the import of the upstream package and the torchaudio operations
it needs."""
