"""Text before it reaches an engine: language codes, sentence and clause splitting and chunking, text that arrives
while it is written (live), and English normalization."""
