"""OpenAI's speech API under `/v1`: its request, voice names, model names, list shapes, error body (and its own body
for a request that does not validate) and speech events."""

from web.front_spec import Front
from web.fronts.openai.protocol import OpenAIErrorBody, SpeechRequest, service_error_body, validation_error_body
from web.fronts.openai.routes import PREFIX, router

FRONT = Front(
    name="openai",
    prefix=PREFIX,
    routers=(router,),
    error_body=service_error_body,
    error_model=OpenAIErrorBody,
    validation_error_body=validation_error_body,
    speech_paths=(PREFIX + "/audio/speech",),
    text_fields=((SpeechRequest, "input"),),
)
