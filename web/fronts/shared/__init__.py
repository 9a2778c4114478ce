"""What every front is built from, and no front owns: the service's own speech request, a live request's session,
the contexts of a WebSocket and the loop that serves one, speaking a translated request, and vendors' model ids
(docs/fronts.md)."""
