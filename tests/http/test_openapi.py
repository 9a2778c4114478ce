"""/openapi.json says what the service answers: every route's media types, error bodies and request bodies; the
answers are the documented ones; unknown methods are a 405 that names the allowed ones; and the docs pages reference
only assets this server serves. In this process; Schemathesis against a real server is in tests/e2e/test_openapi.py."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp
from tests.support.openapi import MAX_TEXT_CHARS, openapi_env, operations
from voicebank.registration import Registration
from web.front_spec import front_for
from web.fronts import FRONTS
from web.fronts.shared.requests import LiveOptions

ERROR_STATUSES = (400, 401, 403, 404, 408, 409, 413, 415, 416, 422, 429, 503, 507)
AUDIO_TYPES = {"application/octet-stream", "audio/wav", "audio/mpeg", "audio/ogg", "audio/aac", "audio/flac"}
SPEECH_HEADERS = {"X-Sample-Rate", "X-Audio-Format", "X-Channels", "X-Engine", "X-Voice-Id", "X-Cache"}
PUBLIC_PATHS = {"/health", "/ready", "/metrics"}
ASSET_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".png": "image/png"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    tmp = tmp_path_factory.mktemp("openapi")
    with InProcessApp(tmp, **openapi_env(tmp)) as running:
        yield running


@pytest.fixture(scope="module")
def schema(app: InProcessApp) -> dict[str, Any]:
    return app.client.get("/openapi.json").json()


def assert_documented(schema: dict[str, Any], method: str, path: str, response: httpx2.Response) -> None:
    """The response is one the schema documents for the operation: its status, media type, required headers, and
    (for JSON) its body."""
    entry = schema["paths"][path][method.lower()]["responses"].get(str(response.status_code))
    assert entry is not None, f"{method} {path}: {response.status_code} is not documented"
    media_type = response.headers["content-type"].split(";")[0]
    assert media_type in entry["content"], f"{method} {path}: {media_type} is not one of {list(entry['content'])}"
    for name, header in entry.get("headers", {}).items():
        if header.get("required"):
            assert name in response.headers, f"{method} {path}: {response.status_code} lacks {name}"
    if media_type == "application/json":
        body_schema = {**entry["content"][media_type]["schema"], "components": schema["components"]}
        jsonschema.validate(response.json(), body_schema)


def test_every_error_status_is_documented_with_the_service_error_body(schema: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in json.dumps(schema)  # FastAPI's default 422, which no answer has
    for path, method, operation in operations(schema):
        # /ready's 503 is its answer, not an error: the node's state.
        body = "ReadyState" if path == "/ready" else front_for(FRONTS, path).error_model.__name__
        for status, entry in operation["responses"].items():
            if int(status) < 400:
                continue
            assert int(status) in ERROR_STATUSES, f"{method} {path}: {status}"
            assert entry["content"] == {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}}
            if status in ("429", "503"):
                assert entry["headers"]["Retry-After"]["required"], f"{method} {path}: {status} without Retry-After"
        keyed = path not in PUBLIC_PATHS
        assert ("401" in operation["responses"]) == keyed, f"{method} {path}"
        assert ("security" in operation) == keyed, f"{method} {path}"
        if path.startswith("/admin/") or path == "/model/unload":
            assert "403" in operation["responses"], f"{method} {path}"
        if "requestBody" in operation:
            assert "413" in operation["responses"], f"{method} {path}"
    assert set(schema["components"]["schemas"]["ErrorBody"]["required"]) == {"code", "message"}


def test_speech_routes_document_every_media_type_they_answer(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    tts = paths["/tts"]["post"]["responses"]["200"]
    assert next(iter(tts["content"])) == "audio/wav"  # the default
    assert set(tts["content"]) == AUDIO_TYPES | {"text/vtt", "application/x-subrip", "application/json"}
    assert tts["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/TimedSpeech"}
    assert tts["headers"]["X-Engine"]["required"]  # the others only come with audio, not with captions

    stream = paths["/tts/stream"]["post"]["responses"]["200"]
    assert next(iter(stream["content"])) == "application/octet-stream"
    assert set(stream["content"]) == AUDIO_TYPES
    assert {name for name, header in stream["headers"].items() if header["required"]} == SPEECH_HEADERS

    openai = paths["/v1/audio/speech"]["post"]["responses"]["200"]
    assert next(iter(openai["content"])) == "audio/mpeg"
    assert set(openai["content"]) == AUDIO_TYPES | {"text/event-stream"}

    for method in ("post", "put"):
        live = paths["/tts/live"][method]
        assert set(live["responses"]["200"]["content"]) == AUDIO_TYPES
        assert list(live["requestBody"]["content"]) == ["application/x-ndjson"]
        query = {p["name"] for p in live["parameters"] if p["in"] == "query"}
        assert query == set(LiveOptions.model_fields)

    assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert set(paths["/voices/{voice_id}/bundle"]["get"]["responses"]["200"]["content"]) == {"application/zip"}
    assert set(paths["/voices/bundle"]["post"]["requestBody"]["content"]) == {"application/zip"}
    assert paths["/ready"]["get"]["responses"]["503"]["headers"]["Retry-After"]["required"]


def test_post_voices_documents_its_form(schema: dict[str, Any]) -> None:
    body = schema["paths"]["/voices"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    registered = {field.name for field in dataclasses.fields(Registration)}
    # Every part the registration reads; the file name and the expected id come from elsewhere (a part's header, a
    # bundle).
    assert set(body["properties"]) == registered - {"voice_pack_filename", "expected_id"}
    assert set(body["properties"]) >= {
        "audio",
        "voice_pack",
        "engine",
        "ref_text",
        "x_vector_only_mode",
        "seed_audio",
        "seed_text",
        "replace",
        "language",
    }
    for name in ("audio", "voice_pack", "seed_audio"):
        assert body["properties"][name] == {**body["properties"][name], "type": "string", "format": "binary"}
    assert body["required"] == ["engine"]
    assert body["properties"]["engine"]["enum"] == ["kokoro", "voxcpm", "qwen", "dots", "cosyvoice"]
    responses = schema["paths"]["/voices"]["post"]["responses"]
    assert {"200", "201", "400", "409", "413", "415", "422", "503", "507"} <= set(responses)


def test_text_limits_are_what_the_service_enforces(schema: dict[str, Any]) -> None:
    models = schema["components"]["schemas"]
    assert models["TTSRequest"]["properties"]["text"]["minLength"] == 1
    assert models["TTSRequest"]["properties"]["text"]["maxLength"] == MAX_TEXT_CHARS
    assert models["SpeechRequest"]["properties"]["input"]["maxLength"] == MAX_TEXT_CHARS


@pytest.mark.slow
def test_answers_are_the_documented_ones(client: TestClient, schema: dict[str, Any]) -> None:
    def check(method: str, path: str, status: int, url: str | None = None, **kwargs: Any) -> httpx2.Response:
        response = client.request(method, url or path, **kwargs)
        assert response.status_code == status, response.text
        assert_documented(schema, method, path, response)
        return response

    check("POST", "/tts", 200, json={"text": "Hello.", "voice_id": "af_heart"})
    timed = check("POST", "/tts", 200, json={"text": "Hello there.", "voice_id": "af_heart", "timestamps": True})
    assert timed.json()["words"]
    captions = check("POST", "/tts", 200, json={"text": "Hello.", "voice_id": "af_heart", "format": "vtt"})
    assert captions.text.startswith("WEBVTT")
    check("POST", "/tts/stream", 200, json={"text": "Hello.", "format": "opus"})
    check("POST", "/tts", 422, json={"text": ""})
    check("POST", "/tts", 413, json={"text": "a" * (MAX_TEXT_CHARS + 1)})
    check("POST", "/tts/stream", 404, json={"text": "Hello.", "voice_id": "nobody"})
    check("POST", "/tts", 400, content=b'{"text": "\xff"}', headers={"content-type": "application/json"})
    check(
        "POST",
        "/v1/audio/speech",
        200,
        json={"model": "tts-1", "input": "Hi.", "voice": "alloy", "stream_format": "sse"},
    )
    check("POST", "/v1/audio/speech", 404, json={"model": "nope", "input": "Hi.", "voice": "alloy"})
    check("POST", "/v1/audio/speech", 422, json={"model": "tts-1", "input": "Hi.", "voice": " "})
    check("POST", "/voices", 415, content=b"{}", headers={"content-type": "application/json"})
    check("POST", "/voices", 422, files={"engine": (None, "voxcpm")})
    check("POST", "/voices/bundle", 422, content=b"not a zip")
    check("GET", "/voices/{voice_id}/bundle", 422, "/voices/af_heart/bundle")
    check("DELETE", "/voices/{voice_id}", 409, "/voices/af_heart")
    check("POST", "/admin/engines/{name}/load", 503, "/admin/engines/voxcpm/load")
    check("GET", "/metrics", 200)
    check("GET", "/ready", 200)
    check("GET", "/engines", 422, headers={"X-Fairness-Key": "x" * 65})


def test_a_wrong_first_live_message_gets_its_error_status(client: TestClient, schema: dict[str, Any]) -> None:
    response = client.post("/tts/live", content=b'{"text": 5}\n', headers={"content-type": "application/x-ndjson"})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_message"
    assert_documented(schema, "POST", "/tts/live", response)


def _example_path(template: str) -> str:
    """A path the template matches: an engine's name, or a voice id."""
    return re.sub(r"\{[^}]+\}", lambda param: "kokoro" if param[0] == "{name}" else "0123456789abcdef", template)


def test_an_unknown_method_is_a_405_that_names_the_allowed_ones(client: TestClient, schema: dict[str, Any]) -> None:
    for template, item in schema["paths"].items():
        path = _example_path(template)
        for method in ("TRACE", "PATCH"):
            if method.lower() in item:  # Cartesia's dictionaries are updated with PATCH
                continue
            response = client.request(method, path)
            assert response.status_code == 405, f"{method} {path}: {response.text}"
            assert response.headers["allow"] == ", ".join(sorted(m.upper() for m in item)), path
            body = response.json()
            if template.startswith("/elevenlabs/"):
                code = body["detail"]["status"]
            elif template.startswith("/cartesia/"):
                code = body["error_code"]
            elif template.startswith("/deepgram/"):
                code = body["err_code"]
            elif template.startswith("/vapi/"):
                code = body["error"]["code"]
            else:
                code = body["error"]["code"] if template.startswith("/v1/") else body["code"]
            assert code == "method_not_allowed"
    ws = client.get("/tts/live/ws")
    assert (ws.status_code, ws.headers["upgrade"]) == (426, "websocket")
    assert ws.json()["code"] == "upgrade_required"
    trace = client.request("TRACE", "/tts/live/ws")
    assert (trace.status_code, trace.headers["allow"]) == (405, "GET")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    keys = {"POLYTTS_API_KEYS": json.dumps({"user-secret": "user"}), "POLYTTS_ADMIN_KEYS": json.dumps({"root": "a"})}
    with InProcessApp(tmp_path_factory.mktemp("keyed"), POLYTTS_WARM_ON_START="false", **keys) as running:
        yield running


def test_key_errors_are_the_documented_ones(keyed: InProcessApp, schema: dict[str, Any]) -> None:
    client = keyed.client
    for method, path in (("GET", "/voices"), ("POST", "/tts"), ("GET", "/v1/models"), ("POST", "/tts/live")):
        response = client.request(method, path)
        assert response.status_code == 401
        assert_documented(schema, method, path, response)
    response = client.get("/admin/memory", headers={"Authorization": "Bearer user-secret"})
    assert response.status_code == 403
    assert_documented(schema, "GET", "/admin/memory", response)


# --- the docs pages ---------------------------------------------------------------------------------------------


def assets(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_only_assets_this_server_serves(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    html = response.text
    assert re.findall(r"https?://", html) == [], "a docs page must not name another host"
    referenced = assets(html)
    assert any(url.endswith(".js") for url in referenced)
    for url in referenced:
        assert url.startswith("/docs/assets/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-type"] == ASSET_TYPES[url[url.rindex(".") :]], url
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"  # versioned URLs
        assert len(asset.content) > 1000, url
    assert "/openapi.json" in html


def test_swagger_ui_oauth2_redirect_and_unknown_assets(client: TestClient) -> None:
    assert client.get("/docs/oauth2-redirect").status_code == 200
    missing = client.get(re.sub(r"/[^/]+$", "/missing.js", assets(client.get("/docs").text)[0]))
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
