"""The service's routes, one module per area; `server.create_app` includes each module's `router`."""
