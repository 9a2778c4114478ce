"""The web layer: everything that imports FastAPI or Starlette. Routes per API surface, authentication, middleware,
the one mapping from domain errors onto HTTP answers, the OpenAPI additions, request/response protocols and the
live transport (WebSocket and duplex HTTP)."""
