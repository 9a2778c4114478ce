"""Audio after an engine made it: PCM and WAV framing and the streaming encoders, seams between chunks, and word
timings with the captions made from them."""
