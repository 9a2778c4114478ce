"""Kokoro-82M: the engine, its ONNX, PyTorch and MLX backends, its stock voices and its voice packs."""
