"""Keys in a WebSocket's query string never reach the log."""

from __future__ import annotations

import logging

import pytest

from web import redaction
from web.fronts import FRONTS


def test_key_bearing_query_parameters_are_redacted_in_uvicorn_lines(caplog: pytest.LogCaptureFixture) -> None:
    redaction.install(FRONTS)
    logger = logging.getLogger("uvicorn.error")
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        path = "/elevenlabs/v1/text-to-speech/af_heart/stream-input?model_id=m&xi-api-key=s3cret&x=1"
        logger.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", path)
        logger.info("GET /tts/websocket?api_key=other-secret")
    said = caplog.text
    assert "s3cret" not in said and "other-secret" not in said
    assert "xi-api-key=[redacted]&x=1" in said and "model_id=m" in said and "api_key=[redacted]" in said
