"""/openapi.json says what the service answers: every route's media types, error bodies and request bodies; unknown
methods are a 405 that names the allowed ones; and Schemathesis, run on the live schema against a real server, finds
no 5xx and no answer that the schema does not allow."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.support.servers import ROOT, ServerProcess
from voicebank.registry import Registration
from web.protocol import LiveOptions

MAX_TEXT_CHARS = 40
"""The test server's POLYTTS_MAX_TEXT_CHARS: the schema's text limit, and a bound on what Schemathesis makes it say."""
SCHEMATHESIS_EXAMPLES = 12
"""Examples per operation and phase: the whole run stays within a few minutes on two cores."""
SCHEMATHESIS_SEED = 20261130
ERROR_STATUSES = (400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 503, 507)
AUDIO_TYPES = {"application/octet-stream", "audio/wav", "audio/mpeg", "audio/ogg", "audio/aac", "audio/flac"}
SPEECH_HEADERS = {"X-Sample-Rate", "X-Audio-Format", "X-Channels", "X-Engine", "X-Voice-Id", "X-Cache"}
PUBLIC_PATHS = {"/health", "/ready", "/metrics"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    """A real server with a short text limit; VoxCPM's weights point nowhere, so it is a served engine that failed
    (its 503s are answered at once instead of after a hub lookup)."""
    tmp = tmp_path_factory.mktemp("openapi")
    proc = ServerProcess(tmp, POLYTTS_MAX_TEXT_CHARS=str(MAX_TEXT_CHARS), POLYTTS_VOXCPM_MODEL=str(tmp / "no-voxcpm"))
    yield proc.start()
    proc.stop()


@pytest.fixture(scope="module")
def schema(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(server.url + "/openapi.json", timeout=30).json()  # type: ignore[no-any-return]


def operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def assert_documented(schema: dict[str, Any], method: str, path: str, response: httpx.Response) -> None:
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
        body = "OpenAIErrorBody" if path.startswith("/v1/") else "ReadyState" if path == "/ready" else "ErrorBody"
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
    assert body["properties"]["engine"]["enum"] == ["kokoro", "voxcpm", "qwen"]
    responses = schema["paths"]["/voices"]["post"]["responses"]
    assert {"200", "201", "400", "409", "413", "415", "422", "503", "507"} <= set(responses)


def test_text_limits_are_what_the_service_enforces(schema: dict[str, Any]) -> None:
    models = schema["components"]["schemas"]
    assert models["TTSRequest"]["properties"]["text"]["minLength"] == 1
    assert models["TTSRequest"]["properties"]["text"]["maxLength"] == MAX_TEXT_CHARS
    assert models["SpeechRequest"]["properties"]["input"]["maxLength"] == MAX_TEXT_CHARS


def test_answers_are_the_documented_ones(server: ServerProcess, schema: dict[str, Any]) -> None:
    def check(method: str, path: str, status: int, url: str | None = None, **kwargs: Any) -> httpx.Response:
        response = client.request(method, url or path, **kwargs)
        assert response.status_code == status, response.text
        assert_documented(schema, method, path, response)
        return response

    with server.client() as client:
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


def test_a_wrong_first_live_message_gets_its_error_status(server: ServerProcess, schema: dict[str, Any]) -> None:
    with server.client() as client:
        response = client.post("/tts/live", content=b'{"text": 5}\n', headers={"content-type": "application/x-ndjson"})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_message"
    assert_documented(schema, "POST", "/tts/live", response)


def _example_path(template: str) -> str:
    """A path the template matches: an engine's name, or a voice id."""
    return re.sub(r"\{[^}]+\}", lambda param: "kokoro" if param[0] == "{name}" else "0123456789abcdef", template)


def test_an_unknown_method_is_a_405_that_names_the_allowed_ones(server: ServerProcess, schema: dict[str, Any]) -> None:
    with server.client() as client:
        for template, item in schema["paths"].items():
            path = _example_path(template)
            for method in ("TRACE", "PATCH"):
                response = client.request(method, path)
                assert response.status_code == 405, f"{method} {path}: {response.text}"
                assert response.headers["allow"] == ", ".join(sorted(m.upper() for m in item)), path
                body = response.json()
                code = body["error"]["code"] if template.startswith("/v1/") else body["code"]
                assert code == "method_not_allowed"
        ws = client.get("/tts/live/ws")
        assert (ws.status_code, ws.headers["upgrade"]) == (426, "websocket")
        assert ws.json()["code"] == "upgrade_required"
        trace = client.request("TRACE", "/tts/live/ws")
        assert (trace.status_code, trace.headers["allow"]) == (405, "GET")


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    keys = {"POLYTTS_API_KEYS": json.dumps({"user-secret": "user"}), "POLYTTS_ADMIN_KEYS": json.dumps({"root": "a"})}
    proc = ServerProcess(tmp_path_factory.mktemp("keyed"), POLYTTS_WARM_ON_START="false", **keys)
    yield proc.start(wait_ready=False)
    proc.stop()


def test_key_errors_are_the_documented_ones(keyed_server: ServerProcess, schema: dict[str, Any]) -> None:
    with keyed_server.client() as client:
        for method, path in (("GET", "/voices"), ("POST", "/tts"), ("GET", "/v1/models"), ("POST", "/tts/live")):
            response = client.request(method, path)
            assert response.status_code == 401
            assert_documented(schema, method, path, response)
        response = client.get("/admin/memory", headers={"Authorization": "Bearer user-secret"})
        assert response.status_code == 403
        assert_documented(schema, "GET", "/admin/memory", response)


def test_schemathesis_finds_no_server_error_and_no_answer_the_schema_does_not_allow(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The checks and their settings are in tests/schemathesis.toml; the report lands in the test's folder."""
    report = tmp_path / "schemathesis.json"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        "tests/e2e/schemathesis.toml",
        "--no-color",
        "run",
        f"{server.url}/openapi.json",
        "--max-examples",
        str(SCHEMATHESIS_EXAMPLES),
        "--seed",
        str(SCHEMATHESIS_SEED),
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis")}  # not in the checkout
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    summary = json.loads(report.read_text())
    assert (summary["failures"], summary["errors"], run.returncode) == ([], [], 0), run.stdout[-20_000:]
    assert summary["operations"]["tested"] == len(list(operations(httpx.get(server.url + "/openapi.json").json())))
    assert summary["test_cases"]["generated"] > 500
