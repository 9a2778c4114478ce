"""CosyVoice 2 voice cloning: the engine on PyTorch and the import of FunAudioLLM's model code."""
