"""The playground at /ui/: its files as served, and the page itself driven in a real Chromium against a real server.

The browser tests read what the page did from its own state (`window.polytts.state`) and compare it with what the
same request gives over plain HTTP; each one ends with no console errors.
"""

from __future__ import annotations

import io
import json
import re
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import pytest
from playwright.sync_api import Browser, Page

from bench.common import PROBE
from engines.blends import parse_blend
from errors import InvalidInput
from tests.support.browser import LAPTOP, PHONE, Console, chromium, screenshot, wait_for_js
from tests.support.clips import wav_clip
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess
from tests.support.voices import clone_form
from web.routes.playground import PLAYGROUND_DIR

SENTENCE = "The quick brown fox jumps over the lazy dog."
STATE = "window.polytts.state"
LOADED = "window.polytts && window.polytts.state.voices.length > 0"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[tuple[Page, Console]]:
    context = browser.new_context(viewport=LAPTOP, accept_downloads=True)
    page = context.new_page()
    console = Console(page)
    page.goto(server.url + "/")
    wait_for_js(page, LOADED, timeout=60)
    yield page, console
    context.close()


def preferred_voice(page: Page) -> str:
    """The stock default when this server lists it, else the Japanese pack every ONNX install has."""
    ids = page.evaluate(f"{STATE}.voices.map(v => v.voice_id)")
    return "af_heart" if "af_heart" in ids else "jf_alpha"


def speak(page: Page, text: str) -> dict:
    spoken = page.evaluate(f"{STATE}.spoken")
    page.fill("#text", text)
    page.click("#speak")
    wait_for_js(page, f"{STATE}.spoken > {spoken} || {STATE}.phase === 'error'", timeout=180)
    state = page.evaluate(f"({{...{STATE}, health: null, features: null, voices: null}})")
    assert state["phase"] == "done", state["lastError"]
    return state


def http_samples(server: ServerProcess, body: dict) -> int:
    response = PROBE.post(server.url + "/tts/stream", json=body, timeout=180)
    assert response.status_code == 200, response.text
    return len(response.content) // 2


# --- the files as served ------------------------------------------------------------------------------------------


def referenced_assets(html: str) -> set[str]:
    """The page's own files: what index.html links and what the modules import or load as a worklet."""
    names = set(re.findall(r'(?:src|href)="([^"#:]+)"', html)) - {"../docs", "../redoc"}
    for script in PLAYGROUND_DIR.glob("*.js"):
        source = script.read_text()
        names |= set(re.findall(r'from "\./([^"]+)"', source))
        names |= set(re.findall(r'new URL\("([^"]+)", import\.meta\.url\)', source))
    return names


def test_root_redirects_to_the_page_and_its_files_are_served_with_their_types(client: httpx.Client) -> None:
    for path in ("/", "/ui"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 307
        assert httpx.URL(client.base_url.join(path)).join(response.headers["location"]).path == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["cache-control"] == "no-cache"
    assert "default-src 'self'" in page.headers["content-security-policy"]

    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    assets = referenced_assets(page.text)
    assert {"app.js", "playground.css", "pcm-worklet.js", "blend.js", "favicon.svg"} <= assets
    assert {"speak.js", "voices.js", "params.js", "page.js"} <= assets  # speaking and voices in modules of their own
    assert assets <= {p.name for p in PLAYGROUND_DIR.iterdir()}
    for name in assets:
        response = client.get(f"/ui/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == types[Path(name).suffix], name
        assert response.headers["x-content-type-options"] == "nosniff"
        again = client.get(f"/ui/{name}", headers={"If-None-Match": response.headers["etag"]})
        assert again.status_code == 304, name


def test_nothing_outside_the_folder_is_served(client: httpx.Client) -> None:
    for path in ("/ui/missing.js", "/ui/..%2fserver.py", "/ui/%2e%2e/server.py", "/ui/..%5cserver.py"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"
    assert client.post("/ui/app.js").status_code == 405


def test_the_page_loads_nothing_from_another_host() -> None:
    for path in PLAYGROUND_DIR.iterdir():
        urls = re.findall(r"\b(?:https?|wss?)://[^\s\"')]+", path.read_text())
        assert urls in ([], ["http://www.w3.org/2000/svg"]), (path.name, urls)


def test_what_the_page_reads_from_engines_is_documented(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    answer = schema["paths"]["/engines"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/EngineCatalog"}
    body = client.get("/engines").json()
    jsonschema.validate(body, {**answer, "components": schema["components"]})
    assert {"name": "British English", "code": "en-gb"} in body["languages"]
    assert len({language["code"] for language in body["languages"]}) == len(body["languages"])


def test_the_page_is_not_in_the_api_schema(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith(("/ui", "/docs", "/redoc"))]


# --- the page in Chromium -----------------------------------------------------------------------------------------


def test_speak_plays_the_sentence_as_it_streams(page: tuple[Page, Console], server: ServerProcess) -> None:
    tab, console = page
    voice = preferred_voice(tab)
    tab.select_option("#voice", voice)
    assert tab.input_value("#transport") == "ws"  # the default where the server speaks live: it reads along
    tab.select_option("#transport", "http")
    state = speak(tab, SENTENCE)

    expected = http_samples(server, {"text": SENTENCE, "voice_id": voice})
    assert expected > 0.5 * 24_000  # a real sentence, not a blip
    assert state["transport"] == "http" and state["voiceId"] == voice and state["sampleRate"] == 24_000
    assert state["samplesReceived"] >= expected
    assert state["samplesScheduled"] >= expected
    assert state["ttfaMs"] > 0 and state["totalMs"] >= state["ttfaMs"]
    assert state["rtf"] == pytest.approx(state["totalMs"] / 1000 / state["audioSeconds"])
    assert tab.is_visible("#metrics") and tab.inner_text("#m-rtf") == f"{state['rtf']:.2f}"

    # The worklet plays it out (headless Chromium renders audio to a null sink in real time).
    wait_for_js(tab, f"{STATE}.playback === 'drained'", timeout=60)
    assert tab.evaluate(f"{STATE}.samplesPlayed") >= expected

    with tab.expect_download() as download:
        tab.click("#download-wav")
    with wave.open(io.BytesIO(Path(download.value.path()).read_bytes())) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24_000)
        assert wav.getnframes() == state["samplesReceived"]
    screenshot(tab, "playground-laptop")
    assert console.unexpected() == []


def test_phone_width_fits_and_keyboard_speaks(browser: Browser, server: ServerProcess) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    tab = context.new_page()
    console = Console(tab)
    tab.goto(server.url + "/ui/")
    wait_for_js(tab, LOADED, timeout=60)
    tab.select_option("#voice", preferred_voice(tab))
    tab.fill("#text", SENTENCE)
    tab.focus("#text")
    tab.keyboard.press("Control+Enter")
    wait_for_js(tab, f"{STATE}.spoken === 1 || {STATE}.phase === 'error'", timeout=180)
    assert tab.evaluate(f"{STATE}.phase") == "done"
    assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(tab, "playground-phone")
    assert console.unexpected() == []
    context.close()


# Every visible element of the page that sticks out of its parent's box: none may, at any width.
OVERFLOWING = """(() => [...document.querySelectorAll("body *")].flatMap(element => {
    const parent = element.parentElement;
    const box = element.getBoundingClientRect();
    if (!box.width || element.matches(".skip, option, optgroup")) return [];
    const outer = parent.getBoundingClientRect();
    if (box.left >= outer.left - 0.5 && box.right <= outer.right + 0.5) return [];
    const span = (rect) => `${Math.round(rect.left)}..${Math.round(rect.right)}`;
    return [`${element.tagName.toLowerCase()}#${element.id} ${span(box)} outside its ${parent.tagName.toLowerCase()}`
            + `#${parent.id} ${span(outer)}`];
}))()"""
WIDTHS = (320, 390, 768, 1366)
LONG_BLEND = "af_heart(1)+jf_gongitsune(2)+jf_nezumi(3)+af_bella(4)+zm_yunxia(5)+pm_santa(6)+hf_alpha(7)+bm_fable(8)"


def test_every_width_fits_long_voice_names_and_blends(browser: Browser, server: ServerProcess) -> None:
    """From a phone to a wide desktop nothing is wider than its container, with a registered voice's long label in
    the list, a long blend formula entered and the result of speaking it shown; a screenshot at each width."""
    long_text = "A transcript long enough to make this registered voice's label the widest option of the list."
    form = clone_form(wav_clip(1.2, 430), ref_text=long_text)
    voice_id = PROBE.post(server.url + "/voices", files=form["files"], data=form["data"], timeout=60).json()["voice_id"]
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 800}, is_mobile=True, has_touch=True)
    try:
        tab = context.new_page()
        console = Console(tab)
        tab.goto(server.url + "/ui/")
        wait_for_js(tab, f"{STATE}.voices.some(v => v.voice_id === '{voice_id}')", timeout=60)
        label = tab.evaluate(f"[...document.getElementById('voice').options].find(o => o.value === '{voice_id}').text")
        assert len(label) > 50, label
        tab.fill("#blend", LONG_BLEND)
        assert tab.inner_text("#blend-check").startswith("OK: af_heart 2.8 % + jf_gongitsune 5.6 %")
        speak(tab, SENTENCE)
        for width in WIDTHS:
            tab.set_viewport_size({"width": width, "height": 800})
            assert tab.evaluate("[document.documentElement.scrollWidth, window.innerWidth]") == [width, width]
            assert tab.evaluate(OVERFLOWING) == [], width
            screenshot(tab, f"playground-{width}")
        tab.set_viewport_size({"width": WIDTHS[0], "height": 800})
        tab.fill("#blend", "b" * 150 + "(2)")  # an error quoting a long unbroken name wraps too
        assert "invalid blend part at index 0" in tab.inner_text("#blend-check")
        assert tab.evaluate(OVERFLOWING) == [] and tab.evaluate("document.documentElement.scrollWidth") == WIDTHS[0]
        assert console.unexpected() == []
    finally:
        context.close()
        httpx.delete(f"{server.url}/voices/{voice_id}", timeout=30)


# --- read-along ---------------------------------------------------------------------------------------------------

HEARD = f"""(() => {{
    const context = window.polytts.player.context, clock = window.polytts.player.clock, s = {STATE};
    const current = document.querySelector("#words [aria-current]");
    return {{time: context.currentTime, played: clock ? clock.played / context.sampleRate : 0,
             latency: context.outputLatency || 0, index: s.highlighted, position: s.position, level: s.level,
             current: current ? current.textContent : null, playback: s.playback}};
}})()"""


# Resolves once the page has drawn two more frames: each frame shows the place and level of that moment.
NEXT_FRAMES = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def heard_until(tab: Page, seconds: float) -> dict:
    """What the page shows once its audio clock has moved `seconds` on from now."""
    start = tab.evaluate("window.polytts.player.context.currentTime")
    wait_for_js(tab, f"window.polytts.player.context.currentTime >= {start + seconds}", timeout=30)
    return tab.evaluate(HEARD)


def spoken_at(words: list[dict], seconds: float) -> int:
    """The word being spoken `seconds` into the audio by the server's timings: the last one started by then."""
    return max((i for i, word in enumerate(words) if word["start"] <= seconds), default=-1)


def test_the_highlighted_word_follows_the_audio_clock(page: tuple[Page, Console]) -> None:
    """With the whole file (POST /tts, timestamps) every word arrives before the first is heard: the highlight moves
    with the worklet's clock, stands still while the context is suspended, and clears when playback stops."""
    tab, console = page
    voice = preferred_voice(tab)
    tab.select_option("#voice", voice)
    tab.select_option("#transport", "timed")
    text = "One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve."
    tab.fill("#text", text)
    tab.click("#speak")
    wait_for_js(tab, f"{STATE}.playback === 'playing' && {STATE}.highlighted >= 0", timeout=180)
    words = tab.evaluate(f"{STATE}.words")  # every word's timing, there before the first is heard
    assert [word["word"] for word in words] == text.split() and words[-1]["end"] > 3
    assert [word["start"] for word in words] == sorted(word["start"] for word in words)
    seen: list[int] = []
    while len(seen) < 6:
        heard = heard_until(tab, 0.25)
        assert heard["playback"] == "playing", heard
        # The worklet reports about ten times a second, the page moves the last report on by the audio clock at
        # each frame and subtracts the output's latency: the word shown is the one the timings give for a moment
        # within a report and a frame of the samples played (far from the last word, where arrival would put it).
        early, late = heard["played"] - heard["latency"] - 0.1, heard["played"] + 0.15
        assert spoken_at(words, early) <= heard["index"] <= spoken_at(words, late), (heard, words)
        assert heard["current"] == words[heard["index"]]["word"]
        seen.append(heard["index"])
    assert seen == sorted(seen) and len(set(seen)) >= 4, seen
    assert tab.evaluate(f"{STATE}.levelPeak") > 0.3
    screenshot(tab, "playground-read-along")

    tab.evaluate("window.polytts.player.context.suspend()")  # resolves once the audio clock stands
    tab.evaluate(NEXT_FRAMES)
    held = tab.evaluate(HEARD)
    tab.wait_for_timeout(600)  # time passing on the page's clock while the audio clock stands, not a wait for state
    later = tab.evaluate(HEARD)
    # A report posted before the suspension may still land: it tells the same clock, so the same place.
    assert {**later, "played": None, "position": None} == {**held, "played": None, "position": None}
    assert later["position"] == pytest.approx(held["position"], abs=1e-6) and held["level"] == 0
    tab.evaluate("window.polytts.player.context.resume()")
    wait_for_js(tab, f"{STATE}.highlighted > {held['index']}", timeout=10)

    tab.click("#stop")
    assert tab.evaluate(f"[{STATE}.highlighted, {STATE}.level, {STATE}.playback]") == [-1, 0, "idle"]
    assert tab.locator("#words [aria-current]").count() == 0
    assert tab.inner_text("#words") == text  # the words stay, none highlighted
    assert tab.is_disabled("#stop")
    assert console.unexpected() == []


def test_the_live_websocket_reads_along_by_clause_in_japanese(page: tuple[Page, Console]) -> None:
    """The live WebSocket's `words` events come after each phrase's audio; text without spaces is timed by clause,
    and its clauses are shown as written, without spaces between them."""
    tab, console = page
    tab.select_option("#voice", "jf_alpha")
    assert tab.input_value("#transport") == "ws"
    text = "今日はいい天気ですね、散歩に行きましょう。公園で、少し休みます。"
    tab.fill("#text", text)
    tab.click("#speak")
    wait_for_js(tab, f"{STATE}.playback === 'playing' && {STATE}.highlighted >= 0", timeout=180)
    seen = [tab.evaluate(f"{STATE}.highlighted")]
    while tab.evaluate(f"{STATE}.playback") == "playing":
        seen.append(heard_until(tab, 0.2)["index"])
    clauses = tab.evaluate(f"{STATE}.words.map(w => w.word)")
    assert clauses == ["今日はいい天気ですね、", "散歩に行きましょう。", "公園で、", "少し休みます。"]
    assert tab.inner_text("#words") == text
    assert set(seen) >= {0, 1, 2, 3} and [i for i in seen if i >= 0] == sorted(i for i in seen if i >= 0), seen
    assert tab.evaluate(f"[{STATE}.phase, {STATE}.highlighted]") == ["done", -1]  # played out: nothing highlighted
    assert console.unexpected() == []


# --- browsing voices ----------------------------------------------------------------------------------------------


def listed_voices(tab: Page) -> list[str]:
    return tab.evaluate("[...document.getElementById('voice').options].filter(o => o.value).map(o => o.value)")


def test_the_voice_list_filters_by_language_and_gender(page: tuple[Page, Console], server: ServerProcess) -> None:
    tab, console = page
    voices = PROBE.get(server.url + "/voices").json()["voices"]
    every = listed_voices(tab)
    assert sorted(every) == sorted(v["voice_id"] for v in voices)
    languages = tab.evaluate("[...document.getElementById('voice-language').options].map(o => [o.value, o.text])")
    assert ["ja", "Japanese"] in languages and ["en-gb", "British English"] in languages
    assert {v for v, _ in languages} == {"", *(v["language"] for v in voices if v.get("language"))}

    tab.select_option("#voice-language", "ja")
    japanese = sorted(v["voice_id"] for v in voices if v.get("language") == "ja")
    assert sorted(listed_voices(tab)) == japanese and len(japanese) >= 4
    assert tab.inner_text("#voice-count") == f"{len(japanese)} of {len(voices)} voices"
    assert tab.input_value("#voice") in japanese  # the selected voice follows the filter
    tab.select_option("#voice-gender", "male")
    male = sorted(v["voice_id"] for v in voices if v.get("language") == "ja" and v.get("gender") == "male")
    assert sorted(listed_voices(tab)) == male == ["jm_kumo"]
    assert tab.input_value("#voice") == "jm_kumo"
    assert "Built-in male kokoro voice" in tab.inner_text("#voice-hint")

    tab.select_option("#voice-language", "")
    assert sorted(listed_voices(tab)) == sorted(v["voice_id"] for v in voices if v.get("gender") == "male")
    tab.select_option("#voice-gender", "")
    assert sorted(listed_voices(tab)) == sorted(every)
    assert tab.inner_text("#voice-count") == f"{len(voices)} voices"
    assert console.unexpected() == []


def test_a_voice_previews_with_one_click_and_again_from_the_cache(page: tuple[Page, Console]) -> None:
    tab, console = page
    tab.select_option("#voice", "bf_isabella")
    tab.click("#preview-voice")
    wait_for_js(tab, f"{STATE}.preview.phase === 'ended' || {STATE}.preview.phase === 'error'", timeout=120)
    first = tab.evaluate(f"{STATE}.preview")
    assert first == {"voiceId": "bf_isabella", "phase": "ended", "cache": "miss"}, tab.evaluate(f"{STATE}.lastError")
    tab.click("#preview-voice")
    wait_for_js(tab, f"{STATE}.preview.phase === 'ended' || {STATE}.preview.phase === 'error'", timeout=60)
    assert tab.evaluate(f"{STATE}.preview") == {"voiceId": "bf_isabella", "phase": "ended", "cache": "hit"}
    assert tab.inner_text("#preview-status") == "Preview of bf_isabella (from the server's cache)."
    assert console.unexpected() == []


def test_the_parameters_and_languages_shown_are_the_servers(page: tuple[Page, Console], server: ServerProcess) -> None:
    tab, console = page
    described = PROBE.get(server.url + "/engines").json()
    kokoro = next(engine for engine in described["engines"] if engine["name"] == "kokoro")
    speed = kokoro["parameters"]["properties"]["speed"]
    assert (speed["minimum"], speed["maximum"]) == (0.25, 4)
    tab.select_option("#voice", preferred_voice(tab))
    assert tab.inner_text("#params-legend") == "kokoro parameters"
    slider = tab.locator("#param-speed")
    assert slider.get_attribute("type") == "range"
    assert (float(slider.get_attribute("min") or "nan"), float(slider.get_attribute("max") or "nan")) == (0.25, 4)
    assert float(slider.input_value()) == pytest.approx(speed["default"])

    languages = tab.evaluate("[...document.getElementById('language').options].map(o => [o.value, o.text])")
    assert languages == [["", "Server default"], *([lang["code"], lang["name"]] for lang in described["languages"])]
    assert ["ja", "Japanese"] in languages
    assert console.unexpected() == []


def test_blend_formula_errors_show_inline_naming_the_part(page: tuple[Page, Console]) -> None:
    tab, console = page
    tab.fill("#blend", "af_heart(2)+af_bella(0)")
    check = tab.locator("#blend-check")
    assert check.inner_text() == "invalid blend part at index 1 'af_bella(0)': a weight must be a finite number above 0"
    assert tab.get_attribute("#blend", "aria-invalid") == "true"
    assert tab.evaluate(f"{STATE}.blendError") == {
        "part": "af_bella(0)",
        "index": 1,
        "message": check.inner_text(),
    }
    tab.click("#speak")  # refused in the page: nothing is sent
    assert "Fix the blend formula first" in tab.inner_text("#speak-error")
    assert tab.evaluate(f"{STATE}.phase") == "idle"

    tab.fill("#blend", "af_heart(2)+nobody")
    assert check.inner_text() == "invalid blend part at index 1 'nobody': no Kokoro voice 'nobody' on this server"

    tab.fill("#blend", "af_heart(3)+af_bella(1)")
    assert check.inner_text() == "OK: af_heart 75.0 % + af_bella 25.0 %"
    assert tab.get_attribute("#blend", "aria-invalid") is None
    state = speak(tab, "Blended.")
    assert state["voiceId"] == "af_heart(3)+af_bella(1)" and state["samplesScheduled"] > 0
    assert console.unexpected() == []


BLEND_CASES = [
    "",
    "  ",
    "af_a",
    "a+b",
    "a(2)+b(1)",
    "a(1e+1)+b",
    "a( 2 )",
    "a (2)",
    "a\t(2)",
    "\u3000a\u3000",
    "a(.5)+b(5.)",
    "a(+3)+b",
    "a(0)",
    "a(-1)",
    "a(x)",
    "a(1e400)",
    "a(1e-400)",
    "a+a",
    "a++b",
    "+a",
    "a+",
    "a(2",
    "a)2(",
    "a(1)(2)",
    "bad name(1)",
    "a" * 64,
    "a" * 65,
    "a+b+c+d+e+f+g+h",
    "a+b+c+d+e+f+g+h+i",
    "a(1)+b(2)+c(3)",
    "é(1)",
    "a()",
    "a(1,5)",
    "a.b-c_d(2.5e0)",
    "x(1e308)+y(1e308)",
    "b" * 150 + "(2)",
    "a+" + "é" * 120,
]


def test_the_page_parses_blends_exactly_as_the_server(page: tuple[Page, Console]) -> None:
    tab, console = page
    found = tab.evaluate(
        """cases => cases.map(formula => {
            try { return {parts: window.polytts.parseBlend(formula).map(p => [p.name, p.weight])}; }
            catch (e) { return {error: e.message, part: e.part, index: e.index}; }
        })""",
        BLEND_CASES,
    )
    for formula, js in zip(BLEND_CASES, found, strict=True):
        try:
            parts = parse_blend(formula)
        except InvalidInput as exc:
            assert js == {"error": exc.message, **exc.detail}, formula
        else:
            assert [name for name, _ in js["parts"]] == [p.name for p in parts], formula
            assert [w for _, w in js["parts"]] == pytest.approx([p.weight for p in parts], rel=1e-12), formula
    assert console.unexpected() == []


@pytest.fixture
def voice_pack(tmp_path: Path, assembled_model: Path) -> Path:
    """A valid pack that no built-in voice is: jf_alpha's tensor with a little noise, as .npy."""
    with np.load(assembled_model / "voices.npz") as packs:
        pack = packs["jf_alpha"]
    noisy = pack + np.random.default_rng(7).normal(0, 0.01, pack.shape).astype(np.float32)
    path = tmp_path / "my_voice.npy"
    np.save(path, noisy)
    return path


def test_upload_a_voice_pack_speak_with_it_then_delete_it(
    page: tuple[Page, Console], server: ServerProcess, voice_pack: Path
) -> None:
    tab, console = page
    tab.set_input_files("#pack-file", str(voice_pack))
    tab.click("#pack-submit")
    status = wait_for_js(tab, "document.getElementById('add-status').textContent.includes('It is selected')", 60)
    assert status
    voice_id = tab.input_value("#voice")
    assert re.fullmatch(r"[0-9a-f]{16}", voice_id)
    listed = tab.evaluate(f"{STATE}.voices.find(v => v.voice_id === '{voice_id}')")
    assert listed["engine"] == "kokoro" and listed["kind"] == "pack" and listed["builtin"] is False
    assert tab.evaluate("document.activeElement.id") == "speak"

    tab.select_option("#transport", "http")  # compared below with the same route's answer
    state = speak(tab, SENTENCE)
    assert state["voiceId"] == voice_id
    assert state["samplesScheduled"] >= http_samples(server, {"text": SENTENCE, "voice_id": voice_id})

    tab.once("dialog", lambda dialog: dialog.accept())
    tab.click("#delete-voice")
    wait_for_js(tab, f"!{STATE}.voices.some(v => v.voice_id === '{voice_id}')", timeout=30)
    assert PROBE.get(f"{server.url}/voices/{voice_id}").status_code == 404
    assert f"Deleted voice {voice_id}" in tab.inner_text("#add-status")
    assert console.unexpected() == []


def test_record_a_clip_with_the_microphone_and_register_it(page: tuple[Page, Console], server: ServerProcess) -> None:
    tab, console = page
    engines = tab.evaluate("[...document.getElementById('clip-engine').options].map(o => o.value)")
    if "voxcpm" not in engines:
        pytest.skip(f"no engine on this server clones from a clip (offered: {engines})")
    tab.click("#record")
    wait_for_js(tab, "document.getElementById('record').getAttribute('aria-pressed') === 'true'", timeout=30)
    tab.wait_for_timeout(1500)  # the clip's length (Chromium's fake microphone beeps), not a wait for state
    tab.click("#record")
    wait_for_js(tab, "!document.getElementById('clip-preview').hidden", timeout=30)
    tab.fill("#clip-transcript", "A beep from the fake microphone.")
    tab.select_option("#clip-engine", "voxcpm")
    tab.click("#clip-submit")
    wait_for_js(tab, "document.getElementById('add-status').textContent.includes('It is selected')", timeout=60)

    voice_id = tab.input_value("#voice")
    stored = PROBE.get(f"{server.url}/voices/{voice_id}").json()
    assert stored["engine"] == "voxcpm" and stored["kind"] == "clip"
    assert stored["ref_text"] == "A beep from the fake microphone."
    assert 1.0 <= stored["duration_s"] <= 10.0
    assert tab.inner_text("#params-legend") == "voxcpm parameters"  # the new voice's engine's parameters

    tab.once("dialog", lambda dialog: dialog.accept())
    tab.click("#delete-voice")
    wait_for_js(tab, f"!{STATE}.voices.some(v => v.voice_id === '{voice_id}')", timeout=30)
    assert console.unexpected() == []


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    """A node with API keys on, shared by the tests of what the page does without a key and with one."""
    server = ServerProcess(tmp_path_factory.mktemp("keyed"), POLYTTS_API_KEYS=json.dumps({"s3cret-key": "tester"}))
    yield server.start()
    server.stop()


def test_asks_for_the_api_key_and_keeps_it_in_session_storage_only(browser: Browser, keyed: ServerProcess) -> None:
    context = browser.new_context(viewport=LAPTOP)
    try:
        tab = context.new_page()
        console = Console(tab)
        sent: list[str | None] = []
        # GET /engines is the page's first request that needs a key (its parameter schemas; /health is public).
        tab.on("request", lambda r: sent.append(r.headers.get("authorization")) if r.url.endswith("/engines") else None)
        tab.goto(keyed.url + "/ui/")
        wait_for_js(tab, "document.getElementById('key-dialog').open", timeout=60)
        tab.fill("#key-input", "wrong")
        tab.click("#key-form button[value=save]")
        wait_for_js(tab, "document.getElementById('key-reason').textContent === 'That key was not accepted.'", 30)
        wait_for_js(tab, "document.getElementById('key-dialog').open", timeout=30)
        tab.fill("#key-input", "s3cret-key")
        tab.keyboard.press("Enter")
        wait_for_js(tab, LOADED, timeout=60)

        assert sent == [None, "Bearer wrong", "Bearer s3cret-key"]
        assert tab.evaluate("sessionStorage.getItem('polytts.apiKey')") == "s3cret-key"
        assert tab.evaluate("localStorage.length") == 0 and context.cookies() == []
        assert tab.is_visible("#key-status")
        # Only the two refused requests may show up in the console (Chromium logs every 4xx load).
        assert console.unexpected("status of 401") == []
    finally:
        context.close()


def test_with_keys_on_the_status_reads_the_public_health_then_the_keyed_one(
    browser: Browser, keyed: ServerProcess
) -> None:
    """Without a key, /health is the public view (no default engine, device or queue details); once a key is given,
    the page reads the full one."""
    context = browser.new_context(viewport=LAPTOP)
    try:
        tab = context.new_page()
        console = Console(tab)
        tab.goto(keyed.url + "/ui/")
        wait_for_js(tab, "document.getElementById('status-summary').dataset.state === 'ready'", timeout=60)
        assert tab.inner_text("#status-summary") == "Ready: kokoro"
        assert re.fullmatch(r"Queue: \d+ running, \d+ waiting", tab.inner_text("#queue"))
        wait_for_js(tab, "document.getElementById('key-dialog').open", timeout=60)
        tab.fill("#key-input", "s3cret-key")
        tab.keyboard.press("Enter")
        wait_for_js(tab, "document.getElementById('status-summary').textContent === 'Ready: kokoro on cpu'", 30)
        assert re.fullmatch(r"Queue: \d+ running, \d+ waiting \(\d+ characters\)", tab.inner_text("#queue"))
        assert console.unexpected("status of 401") == []
    finally:
        context.close()


def test_health_strip_shows_engines_and_queue(page: tuple[Page, Console]) -> None:
    tab, console = page
    wait_for_js(tab, "document.getElementById('status-summary').dataset.state === 'ready'", timeout=30)
    assert tab.inner_text("#status-summary") == "Ready: kokoro on cpu"
    assert "kokoro: ready (onnx, cpu), resident" in tab.locator("#engines li").all_inner_texts()
    assert re.fullmatch(r"Queue: \d+ running, \d+ waiting \(\d+ characters\)", tab.inner_text("#queue"))
    assert console.unexpected() == []


def test_a_failed_engine_is_shown_with_its_reason(browser: Browser, tmp_path: Path) -> None:
    broken = ServerProcess(tmp_path, POLYTTS_KOKORO_ONNX_DIR=str(tmp_path / "no-model")).start()
    try:
        context = browser.new_context(viewport=LAPTOP)
        tab = context.new_page()
        console = Console(tab)
        tab.goto(broken.url + "/ui/")
        wait_for_js(tab, "document.getElementById('status-summary').dataset.state === 'failed'", timeout=60)
        reason = PROBE.get(broken.url + "/health").json()["engines"]["kokoro"]["reason"]
        assert reason
        assert tab.inner_text("#status-summary").startswith("Failed: ")
        kokoro = tab.locator("#engines li[data-state=failed]")
        assert kokoro.inner_text().startswith("kokoro: failed") and reason in kokoro.inner_text()
        assert console.unexpected() == []
        context.close()
    finally:
        broken.stop()


def test_the_page_lists_the_keys_jobs_and_plays_a_finished_one(
    page: tuple[Page, Console], server: ServerProcess
) -> None:
    tab, console = page
    made = PROBE.post(server.url + "/jobs", json={"text": "A job for the page.", "format": "mp3"}, timeout=60)
    job_id = made.json()["job_id"]
    wait_until(
        lambda: PROBE.get(f"{server.url}/jobs/{job_id}", timeout=10).json()["state"] == "done", 180, "the job to end"
    )
    tab.click("#jobs-refresh")
    item = f"#jobs-list li[data-job-id='{job_id}'][data-state='done']"
    wait_for_js(tab, f'document.querySelector("{item}") !== null', timeout=30)
    assert "19/19 characters" in tab.inner_text(item)
    tab.click(f"{item} button")
    assert wait_for_js(tab, f'document.querySelector("{item} audio").duration || 0', timeout=30) > 0.5
    assert console.unexpected() == []
    httpx.delete(f"{server.url}/jobs/{job_id}", timeout=10)


# --- trying a pronunciation ---------------------------------------------------------------------------------------

TRIED = f"['ended', 'error'].includes({STATE}.pronunciation?.phase)"


def try_pronunciation(tab: Page) -> dict:
    tab.click("#pron-hear")
    wait_for_js(tab, TRIED, timeout=180)
    return dict(tab.evaluate(f"{STATE}.pronunciation"))


def test_a_lexicon_entry_is_stored_and_heard_as_the_api_says_it(
    page: tuple[Page, Console], server: ServerProcess
) -> None:
    tab, console = page
    voice = preferred_voice(tab)
    tab.select_option("#voice", voice)
    tab.fill("#pron-grapheme", "Zorblax")
    tab.fill("#pron-said", "a banana split")
    tab.fill("#pron-sentence", "I love Zorblax.")
    tried = try_pronunciation(tab)
    assert tried["phase"] == "ended" and tried["error"] is None, tried
    stored = PROBE.post(server.url + "/lexicons", json=[{"grapheme": "Zorblax", "alias": "a banana split"}])
    assert stored.status_code == 200 and tried["lexiconId"] == stored.json()["lexicon_id"]  # stored by the page
    meant = PROBE.post(server.url + "/tts", json={"text": "I love a banana split.", "voice_id": voice}, timeout=180)
    assert tried["bytes"] == len(meant.content)  # the alias is what was said
    assert tab.inner_text("#pron-status") == "Playing the sentence with the entry."

    tab.select_option("#pron-kind", "ipa")
    tab.fill("#pron-grapheme", "Kokoro")
    tab.fill("#pron-said", "kˈoʊkəɹoʊ")
    tab.fill("#pron-sentence", "")  # the word alone
    tried = try_pronunciation(tab)
    assert tried["phase"] == "ended" and tried["request"]["text"] == "Kokoro.", tried
    body = {"text": "Kokoro.", "voice_id": voice, "lexicons": [tried["lexiconId"]]}
    assert tried["bytes"] == len(PROBE.post(server.url + "/tts", json=body, timeout=180).content)

    tab.fill("#pron-said", "k☃")
    tried = try_pronunciation(tab)
    assert tried["error"]["code"] == "unsayable_phonemes" and "☃" in tab.inner_text("#pron-error"), tried
    assert console.unexpected("status of 422") == []


def test_an_ssml_snippet_is_heard_and_its_errors_point_at_the_spot(
    page: tuple[Page, Console], server: ServerProcess
) -> None:
    tab, console = page
    voice = preferred_voice(tab)
    tab.select_option("#voice", voice)
    tab.select_option("#pron-mode", "ssml")
    assert tab.is_hidden("#pron-entry") and tab.is_visible("#pron-ssml")
    tried = try_pronunciation(tab)  # the example snippet
    assert tried["phase"] == "ended", tried
    body = {"text": tab.input_value("#pron-ssml"), "voice_id": voice}
    assert tried["bytes"] == len(PROBE.post(server.url + "/tts", json=body, timeout=180).content)

    snippet = '<speak>Hello there.\n  <break time="1s"></speak>'
    tab.fill("#pron-ssml", snippet)
    tried = try_pronunciation(tab)
    error = tried["error"]
    assert (error["status"], error["code"], error["line"]) == (422, "malformed_xml", 2), tried
    assert tab.inner_text("#pron-error").endswith(f"at line 2, column {error['column']} (malformed_xml)")
    assert tab.inner_text("#pron-where") == f"Line 2, column {error['column']} is selected in the snippet."
    at = len("<speak>Hello there.\n") + error["column"] - 1
    assert tab.evaluate("[document.activeElement.id, document.activeElement.selectionStart]") == ["pron-ssml", at]

    tab.fill("#pron-ssml", '<speak>Hi <audio src="x.wav"/> there.</speak>')
    tried = try_pronunciation(tab)
    assert tried["error"]["code"] == "invalid_ssml" and "<audio>" in tab.inner_text("#pron-error"), tried
    assert tab.inner_text("#pron-status") == "" and tab.is_hidden("#pron-audio")  # no stale audio under the error
    screenshot(tab, "playground-pronunciation")
    assert console.unexpected("status of 422") == []
