"""The HTTP routes, one module per area; each route parses its request, calls the service, and wraps the result."""
