"""The native speech API at the root: `/tts`, `/tts/stream`, the live routes, `/engines` and `/jobs`, in the service's own
request (web/fronts/shared/requests.py) and error body, `{"code", "message", "detail"?}`; every path no other front
claims answers its errors in that body too."""

from errors import ServiceError
from web.api_docs import ErrorBody
from web.front_spec import Front
from web.fronts.native.jobs import router as jobs_router
from web.fronts.native.routes import router
from web.fronts.shared.requests import TTSRequest

FRONT = Front(
    name="native",
    prefix="",
    routers=(router, jobs_router),
    error_body=ServiceError.body,
    error_model=ErrorBody,
    speech_paths=("/tts",),
    own_body_limits=("/tts/live",),
    text_fields=((TTSRequest, "text"),),
)
