"""A node in a fleet, end to end: graceful drain, the admin control plane, livestack attach, and engines that are
never traded for one that cannot load."""

from __future__ import annotations

import io
import json
import signal
import textwrap
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import websockets
from websockets.sync.client import connect as connect_websocket

from bench.common import PROBE
from tests.support.clips import wav_clip
from tests.support.polling import wait_until
from tests.support.servers import ROOT, ServerProcess

LONG = " ".join(
    f"Sentence number {i} of a stream that is still playing when the node is told to stop." for i in range(2)
)
"""About 10 s of speech (5 s at twice the rate): still being made while the test checks what a draining node answers."""
TWICE_AS_FAST = {"speed": 2.0}
"""The drain is about the stream under way finishing whole, not about the audio: half of it is half the CPU."""


def test_sigterm_drains_streams_under_way_then_exits_0(tmp_path: Path, assembled_model: Path) -> None:
    # A drain long enough for the stream on a slow machine: the test is about finishing it, not about the bound.
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_WAV_CACHE_BYTES="0",
        POLYTTS_DRAIN_SECONDS="600",
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            body = {"text": LONG, "language": "en", **TWICE_AS_FAST}
            solo = client.post("/tts/stream", json=body).content
            received = bytearray()
            with client.stream("POST", "/tts/stream", json=body) as stream:
                chunks = stream.iter_raw()
                received += next(chunks)
                assert server.proc is not None
                server.proc.send_signal(signal.SIGTERM)
                with httpx.Client(base_url=server.url, timeout=10) as other:
                    ready = wait_until(
                        lambda: r if (r := other.get("/ready")).status_code == 503 else None, 10, "/ready to say 503"
                    )
                    assert ready.json()["status"] == "draining" and "retry-after" in ready.headers
                    refused = other.post("/tts", json={"text": "Too late.", "language": "en"})
                    assert refused.status_code == 503 and refused.json()["code"] == "draining"
                    assert "retry-after" in refused.headers
                    with pytest.raises(websockets.InvalidStatus) as denied:  # refused before the handshake
                        connect_websocket(server.url.replace("http", "ws") + "/tts/live/ws", open_timeout=10)
                    assert denied.value.response.status_code == 503 and "retry-after" in denied.value.response.headers
                    assert json.loads(denied.value.response.body)["code"] == "draining"
                for chunk in chunks:
                    received += chunk
            assert len(received) == len(solo)  # the stream under way finished whole
        assert server.proc.wait(30) == 0
        log = server.log()
        assert "draining" in log and "tts/stream outcome=ok" in log and "cutting" not in log
    finally:
        server.stop()


def test_drain_time_cuts_what_is_left_and_says_so(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_DRAIN_SECONDS="0.5").start()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            with client.stream("POST", "/tts/stream", json={"text": LONG * 3, "language": "en"}) as stream:
                chunks = stream.iter_raw()  # kept: a dropped iterator closes the response, which cancels the stream
                next(chunks)
                assert server.proc is not None
                server.proc.send_signal(signal.SIGTERM)
                assert server.proc.wait(30) == 0
        log = server.log()
        assert "drain time is up" in log and "outcome=shutting_down" in log
        assert "Traceback" not in log  # a cut the service made is a line of its own, not a stack
    finally:
        server.stop()


ADMIN_ENV = {"POLYTTS_API_KEYS": '{"user-secret": "alice"}', "POLYTTS_ADMIN_KEYS": '{"ops-secret": "ops"}'}


def test_admin_control_plane(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_KOKORO_BACKEND="onnx", **ADMIN_ENV).start()
    user = {"Authorization": "Bearer user-secret"}
    ops = {"Authorization": "Bearer ops-secret"}
    try:
        with server.client() as client:
            assert client.get("/admin/engines").status_code == 401
            refused = client.get("/admin/engines", headers=user)
            assert refused.status_code == 403 and refused.json()["code"] == "admin_key_required"
            assert client.post("/model/unload", headers=user).status_code == 403
            assert client.post("/tts", json={"text": "Hi.", "language": "en"}, headers=ops).status_code == 200

            kokoro = client.get("/admin/engines", headers=ops).json()["engines"]["kokoro"]
            assert kokoro["state"] == "ready" and kokoro["backend"] == "onnx" and kokoro["resident"] is True
            assert kokoro["footprint_bytes"] > 50_000_000 and kokoro["policy"] == "SOFT_PIN" and kokoro["loads"] == 1
            assert kokoro["checkpoint"].startswith("kokoro-82m-int8-onnx@")  # tests pin the int8 route (service_env)
            assert set(kokoro["queue"]) >= {"running", "waiting"}

            pinned = client.put("/admin/engines/kokoro/policy", json={"policy": "HARD_PIN"}, headers=ops)
            assert pinned.status_code == 200 and pinned.json()["policy"] == "HARD_PIN"
            bad = client.put("/admin/engines/kokoro/policy", json={"policy": "GLUED"}, headers=ops)
            assert bad.status_code == 422
            assert client.post("/admin/engines/kokoro/unload", headers=ops).json() == {"unloaded": ["kokoro"]}
            assert client.get("/admin/engines", headers=ops).json()["engines"]["kokoro"]["resident"] is False
            loaded = client.post("/admin/engines/kokoro/load", headers=ops)
            assert loaded.status_code == 200 and loaded.json()["resident"] is True and loaded.json()["loads"] == 2
            missing = client.post("/admin/engines/nope/load", headers=ops)
            assert missing.status_code == 404 and missing.json()["code"] == "engine_not_found"

            memory = client.get("/admin/memory", headers=ops).json()
            assert memory["process"]["rss_bytes"] > 50_000_000 and "kokoro" in memory["engines"]
            # Keys are never shown or logged.
            for route in ("/health", "/metrics", "/admin/scheduler"):
                text = client.get(route, headers=ops).text
                assert "ops-secret" not in text and "user-secret" not in text
        assert "ops-secret" not in server.log() and "user-secret" not in server.log()
    finally:
        server.stop()


def test_a_missing_engine_never_evicts_the_working_one(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_VOXCPM_MODEL=str(tmp_path / "absent"),
        POLYTTS_PCM_CACHE_BYTES="0",
    ).start()
    try:
        with server.client() as client:
            form = {"engine": "voxcpm", "ref_text": "a reference"}
            voice = client.post("/voices", files={"audio": ("r.wav", wav_clip(1.2, 330), "audio/wav")}, data=form)
            answer = client.post("/tts", json={"text": "Clone me.", "voice_id": voice.json()["voice_id"]})
            assert answer.status_code == 503 and answer.json()["code"] == "engine_failed"
            assert "absent" in answer.json()["message"] and "retry-after" in answer.headers
            health = client.get("/health").json()
            assert [r["engine"] for r in health["resident"]] == ["kokoro"]
            assert health["engines"]["voxcpm"]["state"] == "failed"
            assert client.post("/tts", json={"text": "Still here.", "language": "en"}).status_code == 200
    finally:
        server.stop()


STAND_IN = '''
"""A stand-in for the fleet's livestack_node package (the real one is not public): the local residency classes,
and an `attach` that records its call and mounts a route through which the test acts as the broker."""

import importlib.util
import json
import os
import sys
import threading

_spec = importlib.util.spec_from_file_location("_local_residency", os.environ["POLYTTS_ROOT"] + "/gpu/residency.py")
_local = sys.modules["_local_residency"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_local)
ManagedUnit, ModelManager, ResidencyPolicy = _local.ManagedUnit, _local.ModelManager, _local.ResidencyPolicy


def attach(app, *, host_id, kind, units, idle_seconds, coload, gpu_call, port, in_flight, inventory, preload):
    manager = ModelManager(units, idle_seconds, coload=coload)
    with open(os.environ["STAND_IN_RECORD"], "w") as record:
        json.dump({"host_id": host_id, "kind": kind, "units": [u.name for u in units], "idle_seconds": idle_seconds,
                   "coload": coload, "port": port}, record)

    def broker():  # a plain function: FastAPI runs it on a worker thread, as a broker's call would come
        preload()
        return {"in_flight": in_flight(), "inventory": inventory(),
                "gpu_thread": gpu_call(lambda: threading.current_thread().name),
                "managed": manager is not None}

    app.add_api_route("/livestack/probe", broker, methods=["POST"])
    return manager
'''


def test_livestack_attach_with_a_stand_in_package(tmp_path: Path, assembled_model: Path) -> None:
    package = tmp_path / "site" / "livestack_node"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    record = tmp_path / "attach.json"
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_HOST_ID="node-7",
        PYTHONPATH=str(tmp_path / "site"),
        POLYTTS_ROOT=str(ROOT),
        STAND_IN_RECORD=str(record),
    ).start(wait_ready=False)
    try:
        with server.client() as client:
            call = json.loads(record.read_text())
            assert call == {
                "host_id": "node-7",
                "kind": "polytts",
                "units": ["kokoro", "voxcpm"],
                "idle_seconds": 300.0,
                "coload": False,
                "port": server.port,
            }
            assert client.get("/health").json()["fleet"] == {"attached": True, "residency": "livestack_node"}
            # Attached, the node leaves warming to the broker: nothing loads before preload.
            assert client.get("/health").json()["resident"] == []
            pack = client.post(
                "/voices",
                files={"voice_pack": ("p.npy", _pack_bytes(), "application/octet-stream")},
                data={"engine": "kokoro"},
            ).json()["voice_id"]
            probe = client.post("/livestack/probe").json()
            assert probe["gpu_thread"] == "polytts-gpu" and probe["in_flight"] == 0 and probe["managed"]
            assert pack in probe["inventory"]["voice"] and "jf_alpha" in probe["inventory"]["voice"]
            wait_until(
                lambda: client.get("/health").json()["status"] == "ready", 60, "preload to warm the default engine"
            )

            busy = threading.Thread(target=lambda: PROBE.post(server.url + "/tts", json={"text": LONG}, timeout=120))
            busy.start()
            wait_until(lambda: client.post("/livestack/probe").json()["in_flight"] == 1, 30, "a synthesis in flight")
            busy.join()
    finally:
        server.stop()


def _pack_bytes() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.random.default_rng(3).standard_normal((510, 1, 256)).astype(np.float32) * 0.1)
    return buffer.getvalue()


def _pack_form() -> dict:
    return {"files": {"voice_pack": ("p.npy", _pack_bytes(), "application/octet-stream")}, "data": {"engine": "kokoro"}}


def _flac_clip() -> bytes:
    samples = (0.3 * np.sin(2 * np.pi * 180 * np.arange(24_000) / 16_000)).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, samples, 16_000, format="FLAC")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def peers(
    tmp_path_factory: pytest.TempPathFactory, assembled_model: Path
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Node A, and node B whose peers are a dead address, then A; shared by the tests of what follows a request to a
    peer, each with resources of its own (a voice, a lexicon)."""
    tmp_path = tmp_path_factory.mktemp("peers")
    a = ServerProcess(tmp_path / "a", POLYTTS_KOKORO_BACKEND="onnx").start()
    try:
        b = ServerProcess(
            tmp_path / "b",
            POLYTTS_KOKORO_BACKEND="onnx",
            POLYTTS_PEERS=f"http://127.0.0.1:1,{a.url}",
            POLYTTS_PEER_TIMEOUT_S="2",
        ).start()
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def test_a_voice_follows_the_request_to_a_peer(peers: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = peers
    with a.client() as on_a, b.client() as on_b:
        pack = on_a.post("/voices", **_pack_form()).json()["voice_id"]
        clip = on_a.post(
            "/voices",
            files={"audio": ("c.flac", _flac_clip(), "audio/flac")},
            data={"engine": "qwen", "ref_text": "a flac clip", "language": "fr"},
        ).json()["voice_id"]
        assert pack not in on_b.get("/health").json()["inventory"]["voice"]
        spoken = on_b.post("/tts", json={"text": "Served on the other node.", "voice_id": pack, "language": "en"})
        assert spoken.status_code == 200 and spoken.headers["x-voice-id"] == pack
        assert pack in on_b.get("/health").json()["inventory"]["voice"]
        # A clip voice of an engine B does not run is stored all the same, with the same id and language.
        refused = on_b.post("/tts", json={"text": "hi", "voice_id": clip})
        assert refused.status_code == 422 and refused.json()["code"] == "engine_unavailable"
        copied = on_b.get(f"/voices/{clip}").json()
        assert copied["voice_id"] == clip and copied["language"] == "fr-fr" and copied["ref_text"] == "a flac clip"
        unknown = on_b.post("/tts", json={"text": "hi", "voice_id": "0123456789abcdef"})
        assert unknown.status_code == 404 and unknown.json()["code"] == "voice_not_found"


def test_a_lexicon_follows_the_request_to_a_peer(peers: tuple[ServerProcess, ServerProcess]) -> None:
    """A lexicon stored on one node pronounces a request on another (fetched from its peer, checked, stored, with the
    same id), as voices do; one no node has stays a 404."""
    a, b = peers
    with a.client() as on_a, b.client() as on_b:
        rules = [{"grapheme": "Zorblax", "alias": "a banana split with whipped cream"}]
        lexicon_id = on_a.post("/lexicons", content=json.dumps(rules)).json()["lexicon_id"]
        bundle = on_a.get(f"/lexicons/{lexicon_id}/bundle")
        assert bundle.status_code == 200 and bundle.headers["content-type"].startswith("application/json")
        assert on_b.get(f"/lexicons/{lexicon_id}").status_code == 404
        body = {"text": "Zorblax.", "voice": "af_heart", "format": "pcm"}
        said = on_b.post("/tts", json={**body, "lexicons": [lexicon_id]})
        assert said.status_code == 200, said.text
        plain = on_b.post("/tts", json=body)
        assert len(said.content) > 2 * len(plain.content)  # the alias is said
        copied = on_b.get(f"/lexicons/{lexicon_id}")
        assert copied.status_code == 200 and copied.json()["lexicon_id"] == lexicon_id
        unknown = on_b.post("/tts", json={**body, "lexicons": ["0123456789abcdef"]})
        assert unknown.status_code == 404 and unknown.json()["code"] == "lexicon_not_found"


def test_dictionaries_and_lexicon_bundles_follow_the_request_to_a_peer(
    peers: tuple[ServerProcess, ServerProcess],
) -> None:
    """A vendor front's dictionary kept by one node pronounces a request naming it on another (ElevenLabs'
    `pronunciation_dictionary_locators`, with and without a version, and Cartesia's `pronunciation_dict_id`); one
    no node keeps is a 404 in the vendor's shape; a lexicon's bundle imports on another node with its id."""
    alias = "a banana split with whipped cream"
    a, b = peers
    with a.client() as on_a, b.client() as on_b:
        rules = {"name": "brands", "rules": [{"type": "alias", "string_to_replace": "Zorblax", "alias": alias}]}
        made = on_a.post("/elevenlabs/v1/pronunciation-dictionaries/add-from-rules", json=rules).json()
        say = "/elevenlabs/v1/text-to-speech/af_heart?output_format=pcm_24000"
        meant = on_b.post(say, json={"text": f"{alias}."})
        assert meant.status_code == 200, meant.text
        for locator in (
            {"pronunciation_dictionary_id": made["id"]},
            {**{"pronunciation_dictionary_id": made["id"]}, "version_id": made["version_id"]},
        ):
            said = on_b.post(say, json={"text": "Zorblax.", "pronunciation_dictionary_locators": [locator]})
            assert said.status_code == 200 and said.content == meant.content, said.text
        unknown = {"pronunciation_dictionary_id": "0" * 20}
        refused = on_b.post(say, json={"text": "Hi.", "pronunciation_dictionary_locators": [unknown]})
        assert refused.status_code == 404 and refused.json()["detail"]["status"] == "dictionary_not_found"

        headers = {"Cartesia-Version": "2025-04-16"}
        items = {"name": "brands", "items": [{"text": "Qxv", "alias": alias}]}
        cartesia = on_a.post("/cartesia/pronunciation-dicts/", json=items, headers=headers).json()
        output = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
        spoken = {"model_id": "sonic-2", "voice": {"mode": "id", "id": "af_heart"}, "output_format": output}
        said = on_b.post(
            "/cartesia/tts/bytes",
            json={**spoken, "transcript": "Qxv.", "pronunciation_dict_id": cartesia["id"]},
            headers=headers,
        )
        assert said.status_code == 200 and said.content == meant.content, said.text

        lexicon_id = on_a.post("/lexicons", content=json.dumps([{"grapheme": "Blorp", "alias": alias}])).json()[
            "lexicon_id"
        ]
        bundle = on_a.get(f"/lexicons/{lexicon_id}/bundle").content
        imported = on_b.put(f"/lexicons/{lexicon_id}/bundle", content=bundle)
        assert imported.status_code == 201 and imported.json()["lexicon_id"] == lexicon_id
        assert (
            on_b.get(f"/lexicons/{lexicon_id}").json()["lexemes"]
            == on_a.get(f"/lexicons/{lexicon_id}").json()["lexemes"]
        )


def test_bundles_round_trip_and_a_tampered_one_never_lands(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path / "n", POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_WARM_ON_START="false").start()
    try:
        with server.client() as client:
            form = {"engine": "voxcpm", "ref_text": "the reference", "seed_text": "seed words"}
            files = {
                "audio": ("r.flac", _flac_clip(), "audio/flac"),
                "seed_audio": ("s.wav", wav_clip(1.0, 500), "audio/wav"),
            }
            voice = client.post("/voices", files=files, data=form).json()["voice_id"]
            bundle = client.get(f"/voices/{voice}/bundle")
            assert bundle.status_code == 200 and bundle.headers["content-type"] == "application/zip"
            assert client.delete(f"/voices/{voice}").status_code == 200
            imported = client.post(
                "/voices/bundle", content=bundle.content, headers={"content-type": "application/zip"}
            )
            assert imported.status_code == 201 and imported.json() == {"voice_id": voice, "created": True}
            again = client.post("/voices/bundle", content=bundle.content, headers={"content-type": "application/zip"})
            assert again.status_code == 200 and again.json()["created"] is False
            assert client.get(f"/voices/{voice}").json()["seed_text"] == "seed words"

            with zipfile.ZipFile(io.BytesIO(bundle.content)) as original:
                members = {name: original.read(name) for name in original.namelist()}
            client.delete(f"/voices/{voice}")
            before = sorted(p.name for p in (tmp_path / "n" / "voices").iterdir())
            # Seed samples changed (still a valid WAV): the content no longer hashes to the id the bundle claims.
            tampered = {**members, "seed_audio": members["seed_audio"][:-2000] + bytes(2000)}
            # The clip's bytes damaged: not even audio any more.
            damaged = {**members, "audio": members["audio"][:-2000] + bytes(2000)}
            for content, code in ((tampered, "bundle_id_mismatch"), (damaged, "invalid_audio")):
                refused = client.post(
                    "/voices/bundle", content=_zip(content), headers={"content-type": "application/zip"}
                )
                assert refused.status_code == 422 and refused.json()["code"] == code
                assert sorted(p.name for p in (tmp_path / "n" / "voices").iterdir()) == before
            garbage = client.post(
                "/voices/bundle", content=b"PK\x03\x04 not really", headers={"content-type": "application/zip"}
            )
            assert garbage.status_code == 422 and garbage.json()["code"] == "invalid_bundle"
    finally:
        server.stop()


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def test_nodes_sharing_one_voices_folder(tmp_path: Path, assembled_model: Path) -> None:
    shared = {"POLYTTS_VOICES_DIR": str(tmp_path / "shared-voices"), "POLYTTS_KOKORO_BACKEND": "onnx"}
    a = ServerProcess(tmp_path / "a", **shared).start()
    b = ServerProcess(tmp_path / "b", **shared).start()
    try:
        with a.client() as on_a, b.client() as on_b:
            pack = on_a.post("/voices", **_pack_form()).json()["voice_id"]
            # B indexed the folder at its start, before the pack existed: it finds it on disk.
            spoken = on_b.post("/tts", json={"text": "From the shared folder.", "voice_id": pack, "language": "en"})
            assert spoken.status_code == 200
            assert on_b.post("/voices", **_pack_form()).json() == {"voice_id": pack, "created": False}
            assert on_b.delete(f"/voices/{pack}").status_code == 200
            gone = on_a.post("/tts", json={"text": "Deleted elsewhere.", "voice_id": pack})
            assert gone.status_code == 404
    finally:
        a.stop()
        b.stop()
