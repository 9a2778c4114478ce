"""The bench helpers that measure: the real-time listener, the live benchmark's tokens and phrases, the full-duplex
HTTP client, and the abuse probes' payloads; and every benchmark runs as a module of the `bench` package."""

from __future__ import annotations

import asyncio
import importlib
import io
import os
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from bench.abuse.payloads import PACK_SHAPE, multipart, understated_npz
from bench.common import ROOT, SIXTY_WORDS, Playback, host_info
from bench.concurrency import Listening
from bench.contention import Trial, newcomer_row
from bench.duplex_http import DuplexRequest
from bench.jobs import book, window
from bench.live import LiveRun, Phrase, analyse, phrases, tokens
from bench.run_all import BENCHMARKS, run_one
from bench.sweep import percentile, real_time_factor
from engines.cpu_flags import SPEED_FLAGS
from text.chunking import PhraseSegmenter


def test_a_listener_stalls_only_when_audio_arrives_after_what_it_had_was_played() -> None:
    heard = Playback(began=10.0)
    heard.heard(1.0, now=10.5)  # first audio: plays until 11.5
    heard.heard(1.0, now=11.0)  # early: queued, plays until 12.5
    heard.heard(0.5, now=13.0)  # 0.5 s late
    heard.heard(0.5, now=14.5)  # 1.0 s late
    assert heard.ttfa_s == 0.5 and heard.audio_s == 3.0
    assert (heard.stalls, heard.underrun_s, heard.max_stall_s) == (2, 1.5, 1.0)


def test_a_newcomer_row_compares_its_first_audio_with_alone_and_checks_the_streams_playing() -> None:
    def heard(began: float, arrivals: list[tuple[float, float]], status: int = 200) -> Listening:
        playback = Playback(began)
        for seconds, at in arrivals:
            playback.heard(seconds, at)
        return Listening(status=status, playback=playback)

    playing = heard(0.0, [(4.0, 1.0), (8.0, 4.0)])  # in time: no underrun
    row = newcomer_row(1.0, [Trial([playing], heard(3.0, [(3.0, 4.8)]))], running=1)
    assert row["loaded_ttfa_s"] == pytest.approx(1.8) and row["extra_s"] == pytest.approx(0.8)
    assert row["ratio"] == pytest.approx(1.8) and row["met"] and row["admitted_running"] == [1]
    late = newcomer_row(1.0, [Trial([playing], heard(3.0, [(3.0, 5.5)]))], running=1)
    assert not late["met"]  # 1.5 s more than alone
    stalled = heard(0.0, [(2.0, 1.0), (8.0, 4.0)])  # ran dry for a second
    assert not newcomer_row(1.0, [Trial([stalled], heard(3.0, [(3.0, 4.0)]))], running=1)["met"]
    refused = newcomer_row(1.0, [Trial([playing], Listening(status=429, code="stream_capacity_full"))], running=1)
    assert refused["loaded_ttfa_s"] is None and not refused["met"] and refused["refused"] == ["stream_capacity_full"]


def test_the_sweep_takes_percentiles_by_nearest_rank_and_a_streams_real_time_factor_from_its_first_audio() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and percentile([float(i) for i in range(1, 21)], 0.95) == 19.0
    playback = Playback(began=10.0)
    playback.heard(2.0, now=11.0)  # first audio a second after the request
    playback.heard(2.0, now=12.0)
    assert real_time_factor(Listening(status=200, playback=playback, total_s=3.0)) == pytest.approx(0.5)
    assert real_time_factor(Listening(status=429)) is None


def test_a_jobs_window_is_timed_from_one_pieces_end_to_a_later_ones_and_the_book_is_as_long_as_asked() -> None:
    ends = [(100.0, 800, 50.0), (140.0, 1600, 100.0), (180.0, 2400, 150.0), (260.0, 3200, 200.0)]
    assert window(ends, 0, 2) == {
        "pieces": 2,
        "chars": 1600,
        "audio_s": 100.0,
        "wall_s": 80.0,
        "chars_per_s": 20.0,
        "audio_s_per_s": 1.25,
    }
    assert window(ends, 2, 3)["chars_per_s"] == 10.0
    chapters = book(100_000)["chapters"]
    length = sum(len(chapter["text"]) for chapter in chapters)
    assert abs(length - 100_000) < 200 and all(len(chapter["text"]) <= 5_100 for chapter in chapters)


def test_the_host_names_the_processor_flags_that_decide_the_engines_speed() -> None:
    flags = host_info().get("cpu_flags", [])
    assert set(flags) <= set(SPEED_FLAGS) and flags == [f for f in SPEED_FLAGS if f in flags]


def test_tokens_cover_the_text_as_words_and_punctuation() -> None:
    parts = tokens("Hello, world. It's fine!")
    assert parts == ["Hello", ",", " world", ".", " It's", " fine", "!"]
    assert "".join(tokens(SIXTY_WORDS)) == SIXTY_WORDS


def test_phrases_are_the_spoken_ones_with_the_tokens_that_end_and_complete_them() -> None:
    parts = tokens(SIXTY_WORDS)
    segmenter = PhraseSegmenter(60, 120)  # packed as when the server is behind: cuts decided later than released ones
    spoken = [c.text for part in parts for c in segmenter.feed(part)] + [c.text for c in segmenter.flush()]
    found = phrases(parts, spoken, 60, 120)
    assert [p.text for p in found] == spoken and len(found) > 2
    for phrase in found:
        assert phrase.text.endswith(parts[phrase.last_token].strip())
        assert phrase.last_token <= phrase.completing_token <= len(parts)
    assert found[-1].completing_token == len(parts)  # the last phrase is spoken at the end of the text
    assert [p.last_token for p in found] == sorted({p.last_token for p in found})
    # A clause is complete once the word after its comma arrives, however long the server then waited to pack it.
    clause = next(p for p in found if p.text.endswith(","))
    assert clause.completing_token == clause.last_token + 1


def test_each_phrase_is_timed_from_its_tokens_to_the_audio_at_its_offset() -> None:
    said = [Phrase("One two.", last_token=1, completing_token=2), Phrase("Three.", last_token=2, completing_token=3)]
    run = LiveRun(
        "http", began=0.0, sent=[0.0, 0.1, 0.2, 0.3], sample_rate=24_000, audio=[(1.0, 4800), (1.05, 4800), (1.5, 9600)]
    )
    result = analyse(run, said, starts=[0, 9600])
    first, second = (
        {key: value if isinstance(value, str) else round(value, 3) for key, value in row.items()}
        for row in result["phrases"]
    )
    # The first phrase: its last token at 0.1 s, completed by the next at 0.2 s, its audio at 1.0 s.
    assert first == {
        "phrase": 1,
        "text": "One two.",
        "chars": 8,
        "after_last_token_s": 0.9,
        "text_wait_s": 0.1,
        "gpu_wait_s": 0.0,
        "after_ready_s": 0.8,
    }
    # The second: complete at the end of the text (0.3 s), but the first phrase's audio ran until 1.05 s.
    assert second == {
        "phrase": 2,
        "text": "Three.",
        "chars": 6,
        "after_last_token_s": 1.3,
        "text_wait_s": 0.1,
        "gpu_wait_s": 0.75,
        "after_ready_s": 0.45,
    }
    playback = result["playback"]  # 0.1 s pieces at 1.0 and 1.05 play until 1.2; the next comes at 1.5
    assert playback["stalls"] == 1 and round(playback["underrun_s"], 3) == 0.3 and round(playback["audio_s"], 3) == 0.4


async def echo_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers at once, then sends back each chunk of the request body as it arrives."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Echo: yes\r\n\r\n")
    while size := int((await reader.readline()).strip(), 16):
        writer.write(b"%x\r\n%s\r\n" % (size, await reader.readexactly(size)))
        await reader.readexactly(2)
        await writer.drain()
    await reader.readexactly(2)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    writer.close()


async def test_a_duplex_request_reads_the_answer_while_its_body_is_being_sent() -> None:
    server = await asyncio.start_server(echo_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, await DuplexRequest.open(f"http://127.0.0.1:{port}", "POST", "/echo") as request:
        await request.send(b"first")
        head = await asyncio.wait_for(request.head(), 5)  # before the body has ended
        assert head.status == 200 and head.headers["x-echo"] == "yes"
        pieces = request.body()
        assert await asyncio.wait_for(anext(pieces), 5) == b"first"
        await request.send(b"second")
        assert await asyncio.wait_for(anext(pieces), 5) == b"second"
        await request.end()
        assert [piece async for piece in pieces] == []


def test_the_pack_bomb_claims_a_packs_size_and_inflates_to_far_more() -> None:
    bomb = understated_npz(8 << 20)
    with zipfile.ZipFile(io.BytesIO(bomb)) as archive:
        (member,) = archive.infolist()
    assert member.file_size == int(np.prod(PACK_SHAPE)) * 4 + 128
    # The member's deflated data follows its 30-byte local header, its name and its extra field.
    name_length, extra_length = struct.unpack_from("<HH", bomb, member.header_offset + 26)
    start = member.header_offset + 30 + name_length + extra_length
    inflated = zlib.decompressobj(-zlib.MAX_WBITS).decompress(bomb[start : start + member.compress_size])
    assert len(inflated) == 128 + (8 << 20) and len(bomb) < 100_000


def test_multipart_bodies_name_their_parts() -> None:
    body = multipart([("engine", None, b"qwen"), ("audio", "a.wav", b"RIFF")], "b")
    assert body == (
        b'--b\r\nContent-Disposition: form-data; name="engine"\r\n\r\nqwen\r\n'
        b'--b\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\n\r\nRIFF\r\n--b--\r\n'
    )


def test_every_benchmark_is_a_module_of_the_bench_package_run_from_the_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in BENCHMARKS:
        monkeypatch.setattr(sys, "argv", [name, "--help"])
        # What `python -m bench.<name>` runs: the module, or a package's __main__.
        module = importlib.import_module(f"bench.{name}")
        if hasattr(module, "__path__"):
            module = importlib.import_module(f"bench.{name}.__main__")
        with pytest.raises(SystemExit) as done:
            module.main()
        assert done.value.code == 0 and "usage:" in capsys.readouterr().out, name
    # As run_all launches them: `python -m`, from the repository root, nothing added to the import path.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, "-m", "bench.run_all", "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and "python -m bench.run_all" in run.stdout, run.stderr


def test_run_all_launches_each_benchmark_as_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[str]] = []

    class Finished:
        def __init__(self, command: list[str], cwd: Path) -> None:
            launched.append(command)
            assert cwd == ROOT

        def wait(self, timeout: float | None = None) -> int:
            return 0

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", Finished)
    out = tmp_path / "stream.json"
    out.write_text('{"figures": {}}')
    entry = run_one("stream", out, ["--url", "http://127.0.0.1:1"], timeout=5)
    assert launched == [[sys.executable, "-m", "bench.stream", "--out", str(out), "--url", "http://127.0.0.1:1"]]
    assert entry["returncode"] == 0 and entry["result"] == {"figures": {}} and "error" not in entry
