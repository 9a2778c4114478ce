"""The reference documentation; `docs.generate` writes the parts declared in code (settings, error codes)."""
