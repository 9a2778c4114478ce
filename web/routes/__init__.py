"""The node's own routes beside the fronts, one module per area (voices, operations, admin, playground, docs); each
route parses its request, calls the service, and wraps the result."""
