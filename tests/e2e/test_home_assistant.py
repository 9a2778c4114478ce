"""Home Assistant through Wyoming, end to end: a real node, the `wyoming-openai` bridge pointed at its /v1 as
deploy/wyoming/ runs it, and the `wyoming` package's client speaking to the bridge as Home Assistant's integration
does (describe, synthesize, and the streaming synthesize-start/chunk/stop events)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_deploy import verify
from tests.support.clips import assert_speech_like
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess
from tests.support.wyoming_bridge import UNIT, BridgeProcess, HomeAssistant, bridge_interpreter, bridge_python

VOICE = "af_heart"
KEY = "sk-home"
FORMAT = (24_000, 2, 1)
"""Kokoro's rate, 16-bit mono: what every audio-start says."""


@pytest.fixture(scope="module")
def python() -> Path:
    interpreter = bridge_interpreter()
    if interpreter is None:
        pytest.skip("wyoming-openai needs Python 3.12 or newer, and none is installed here")
    return bridge_python(interpreter)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("ha-node")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def home(python: Path, node: ServerProcess) -> Iterator[HomeAssistant]:
    bridge = BridgeProcess(python, node.url, node.tmp / "bridge.log").start()
    yield HomeAssistant(bridge.port)
    bridge.stop()


def seconds(pcm: bytes | bytearray) -> float:
    return len(pcm) / 2 / FORMAT[0]


def assert_speech(pcm: bytes | bytearray) -> None:
    assert_speech_like(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, FORMAT[0])


def test_describe_lists_the_nodes_voices_with_streaming(home: HomeAssistant) -> None:
    info = home.describe()
    voices = {voice.name for program in info.tts for voice in program.voices}
    assert {VOICE, "am_michael", "alloy"} <= voices, sorted(voices)
    assert all(program.supports_synthesize_streaming for program in info.tts)


def test_synthesize_answers_speech_at_a_fixed_rate(home: HomeAssistant) -> None:
    text = "The kitchen lights are now off."
    heard = home.synthesize(text, VOICE)
    assert heard.events[0] == "audio-start" and heard.events[-1] == "audio-stop"
    assert heard.formats == [FORMAT]
    assert 0.04 * len(text) < seconds(heard.pcm) < 0.2 * len(text), seconds(heard.pcm)
    assert_speech(heard.pcm)


def test_streamed_text_is_spoken_sentence_by_sentence(home: HomeAssistant, node: ServerProcess) -> None:
    """A reply written as a language model streams it: each sentence is its own request to the node as soon as it is
    complete, and Home Assistant hears one audio stream at one rate, then synthesize-stopped."""
    parts = ["It is twenty ", "degrees outside. ", "Tomorrow will be ", "warmer, with some sun. ", "Enjoy your day."]
    logged = len(node.log())
    heard = home.synthesize_streaming(parts, VOICE)
    assert heard.events[0] == "audio-start" and heard.events[-2:] == ["audio-stop", "synthesize-stopped"]
    assert heard.formats == [FORMAT]
    assert seconds(heard.pcm) > 3.0
    assert_speech(heard.pcm)
    line = re.compile(r"v1/audio/speech outcome=ok engine=kokoro voice=af_heart chars=(\d+) ")
    found = wait_until(lambda: line.findall(node.log()[logged:]), 10, "the node's lines", detail=node.log)
    assert len(found) == 3 and sorted(map(int, found)) == sorted(
        map(len, ["It is twenty degrees outside.", "Tomorrow will be warmer, with some sun.", "Enjoy your day."])
    ), found


def test_a_node_with_keys_takes_the_bridge_with_its_key_and_voices_named(
    python: Path, tmp_path: Path, assembled_model: Path
) -> None:
    """With API keys, the bridge's key reaches /v1/audio/speech, but its voice listing sends none (401, and the
    bridge exits): on such a node the voices are named with --tts-voices, as docs/home-assistant.md says."""
    keyed = ServerProcess(tmp_path / "node", POLYTTS_API_KEYS=f'{{"{KEY}": "home-assistant"}}').start()
    try:
        listing = BridgeProcess(python, keyed.url, tmp_path / "listing.log", "--tts-openai-key", KEY)
        with pytest.raises(RuntimeError, match="exited"):
            listing.start()
        assert "GET /v1/audio/voices 401" in keyed.log()
        named = BridgeProcess(
            python, keyed.url, tmp_path / "named.log", "--tts-openai-key", KEY, "--tts-voices", VOICE
        ).start()
        try:
            heard = HomeAssistant(named.port).synthesize("Good night.", VOICE)
        finally:
            named.stop()
        assert heard.formats == [FORMAT] and seconds(heard.pcm) > 0.4
        assert_speech(heard.pcm)
    finally:
        keyed.stop()


def test_the_unit_systemd_verifies_once_the_bridge_is_installed(python: Path, tmp_path: Path) -> None:
    """The unit as documented: copied as is, with the bridge's environment where its comment puts it."""
    systemd_analyze = shutil.which("systemd-analyze")
    if systemd_analyze is None:
        pytest.skip("systemd-analyze is absent: `apt-get install -y systemd` (Debian/Ubuntu) to verify the unit")
    installed = tmp_path / ".local" / "share" / "wyoming-openai" / "bin"
    installed.mkdir(parents=True)
    (installed / "python").symlink_to(python)
    units = tmp_path / ".config" / "systemd" / "user"
    units.mkdir(parents=True)
    shutil.copy(UNIT, units)
    result = verify(systemd_analyze, units / UNIT.name, tmp_path)
    assert result.returncode == 0 and not result.stdout.strip(), result.stderr
