"""The web layer: everything that imports FastAPI or Starlette. The app factory (app), the fronts (web/fronts/, each
client API a package behind one `front_spec.Front`), the node's own routes (web/routes/), authentication, middleware,
the one mapping from domain errors onto HTTP answers, the OpenAPI additions, and the server that drains (serving)."""
