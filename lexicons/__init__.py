"""Pronunciation lexicons: what a lexicon is (`lexicon`), read from a W3C PLS document (`pls`) or a JSON list of
rules (`rules`), stored content-addressed and atomically (`store`), and applied to a request's text in one pass
(`matcher`)."""
