"""The Wyoming bridge Home Assistant reaches the node through (`wyoming-openai`), as a process of its own, and what
Home Assistant does with it, spoken with the `wyoming` package's client.

The bridge needs Python 3.12 or newer and an older `openai` than the test environment's, so it gets a virtual
environment of its own, made once from deploy/wyoming/requirements.txt inside the test environment's folder (ignored
by git, like the test environment) and made again when that file changes.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from tests.support.polling import wait_until
from tests.support.servers import ROOT, free_port

REQUIREMENTS = ROOT / "deploy" / "wyoming" / "requirements.txt"
UNIT = ROOT / "deploy" / "wyoming" / "wyoming-openai.service"
VENV = Path(sys.prefix) / "wyoming-openai"
READY_S = 60.0
EVENT_S = 120.0
"""How long one Wyoming event may take to come: the first audio of a sentence on a busy 2-core machine."""


def bridge_interpreter() -> str | None:
    """A Python the bridge installs on (3.12 or newer): on the PATH, else one pyenv holds; None when there is none."""
    candidates = [shutil.which(name) for name in ("python3.13", "python3.12")]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.1[2-9]*" / "bin" / "python3")))
    for candidate in filter(None, candidates):
        # A pyenv shim is on the PATH for every version but runs only the selected ones.
        probe = subprocess.run(
            [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"], capture_output=True
        )
        if probe.returncode == 0:
            return candidate
    return None


def bridge_python(interpreter: str) -> Path:
    """The bridge's environment's Python, made (or remade, when the requirements changed) first."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([interpreter, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    stamp.write_text(wanted)
    return python


def unit_environment() -> dict[str, str]:
    """The bridge's configuration as the systemd unit sets it (its `Environment=` lines)."""
    lines = UNIT.read_text().splitlines()
    return dict(line.removeprefix("Environment=").split("=", 1) for line in lines if line.startswith("Environment="))


class BridgeProcess:
    """`python -m wyoming_openai` configured as deploy/wyoming/wyoming-openai.service configures it, but on a free
    port and pointed at a given node's /v1 (options, which win over the unit's variables), `args` after them."""

    def __init__(self, python: Path, node_url: str, log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.env = {**os.environ, **unit_environment()}
        self.command = [
            str(python),
            "-m",
            "wyoming_openai",
            "--uri",
            f"tcp://127.0.0.1:{self.port}",
            "--tts-openai-url",
            f"{node_url}/v1",
            *args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> BridgeProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=log, env=self.env)
        wait_until(self._listens, READY_S, "the bridge to listen", detail=self.log)
        return self

    def _listens(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the bridge exited with {self.proc.returncode}:\n{self.log()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Heard:
    """What a synthesis sent back: each audio-start's format, the audio, and every event's type in order."""

    formats: list[tuple[int, int, int]] = field(default_factory=list)
    """Each audio-start's rate, width and channels."""
    pcm: bytearray = field(default_factory=bytearray)
    events: list[str] = field(default_factory=list)


class HomeAssistant:
    """What Home Assistant's Wyoming integration sends: `describe` on setup, then a connection per synthesis."""

    def __init__(self, port: int) -> None:
        self.port = port

    def describe(self) -> Info:
        async def ask() -> Info:
            client = await self._connect()
            try:
                await client.write_event(Describe().event())
                while not Info.is_type((event := await self._next(client)).type):
                    pass
                return Info.from_event(event)
            finally:
                await client.disconnect()

        return asyncio.run(ask())

    def synthesize(self, text: str, voice: str) -> Heard:
        return asyncio.run(self._exchange([Synthesize(text=text, voice=SynthesizeVoice(name=voice)).event()]))

    def synthesize_streaming(self, parts: list[str], voice: str) -> Heard:
        """The streaming events as Home Assistant sends them while a language model writes its answer: start, each
        chunk, the whole text as a plain synthesize (for servers without streaming), stop; the answer ends with
        synthesize-stopped."""
        chosen = SynthesizeVoice(name=voice)
        events = [SynthesizeStart(voice=chosen).event()]
        events += [SynthesizeChunk(text=part).event() for part in parts]
        events += [Synthesize(text="".join(parts), voice=chosen).event(), SynthesizeStop().event()]
        return asyncio.run(self._exchange(events, until=SynthesizeStopped.is_type))

    async def _exchange(self, events: list[Event], until: Callable[[str], bool] = AudioStop.is_type) -> Heard:
        client = await self._connect()
        heard = Heard()
        try:
            for event in events:
                await client.write_event(event)
            while True:
                event = await self._next(client)
                heard.events.append(event.type)
                if AudioStart.is_type(event.type):
                    start = AudioStart.from_event(event)
                    heard.formats.append((start.rate, start.width, start.channels))
                elif AudioChunk.is_type(event.type):
                    heard.pcm += AudioChunk.from_event(event).audio
                if until(event.type):
                    return heard
        finally:
            await client.disconnect()

    async def _connect(self) -> AsyncTcpClient:
        client = AsyncTcpClient("127.0.0.1", self.port)
        await client.connect()
        return client

    @staticmethod
    async def _next(client: AsyncTcpClient) -> Event:
        event = await asyncio.wait_for(client.read_event(), EVENT_S)
        assert event is not None, "the bridge closed the connection"
        return event
