"""The fronts: each client API the service speaks, a package of its own behind one `front_spec.Front`.

A front's package holds its protocol (request and answer models, shapes, its error body), its socket where it has
one, and its routes, and exports `FRONT`; what fronts share lives in `web.fronts.shared`, and no front imports
another. The app factory mounts every front of FRONTS, and hands the list to the modules that answer errors, write
the API docs, read API keys and redact logs. Adding a front: its package here, one entry in FRONTS, and its tests
(docs/fronts.md).
"""

from web.front_spec import Front
from web.fronts import cartesia, deepgram, elevenlabs, native, openai, vapi

FRONTS: tuple[Front, ...] = (native.FRONT, openai.FRONT, elevenlabs.FRONT, cartesia.FRONT, deepgram.FRONT, vapi.FRONT)
"""Every front, in the order their routes are mounted and documented."""
