"""The tiny random Kokoro the tests build (conftest's `tiny_kokoro` fixture): its voice names."""

TINY_KOKORO_VOICES = ("af_tiny", "am_tiny", "bf_tiny")
