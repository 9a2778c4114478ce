// The PolyTTS playground: pick or blend a voice, speak as the audio streams, add and delete voices, watch /health.
// `window.polytts.state` exposes what the page did (samples received and scheduled, timings, last error) for tests.

import { ApiError, apiKey, errorFrom, getJson, onKeyNeeded, postJson, request, setApiKey, url } from "./api.js";
import { BlendError, parseBlend } from "./blend.js";
import { DEFAULT_ENGINES, detectFeatures } from "./features.js";
import { PcmAssembler, StreamPlayer } from "./player.js";
import { canRecord, startRecording } from "./recorder.js";
import { wavBlob } from "./wav.js";

const HEALTH_PERIOD_MS = 2000;
const HIDDEN_HEALTH_PERIOD_MS = 15000; // a background tab polls less
const LANGUAGES = {
  "en-us": "American English", "en-gb": "British English", es: "Spanish", "fr-fr": "French", hi: "Hindi",
  it: "Italian", "pt-br": "Brazilian Portuguese", ja: "Japanese", zh: "Mandarin Chinese",
};
const PREFERRED_VOICES = ["af_heart", "jf_alpha"];

const $ = (id) => document.getElementById(id);

const state = {
  health: null,
  features: { engines: { ...DEFAULT_ENGINES }, enginesRoute: false, formats: [] },
  voices: [],
  phase: "idle", // idle | requesting | streaming | done | stopped | error
  transport: null,
  request: null, // the body of the last speech request
  engine: null,
  voiceId: null,
  sampleRate: null,
  cache: null,
  bytesReceived: 0,
  samplesReceived: 0,
  samplesScheduled: 0,
  samplesPlayed: 0,
  underruns: 0,
  playback: "idle", // idle | playing | drained
  audioContext: "none",
  ttfaMs: null,
  totalMs: null,
  audioSeconds: null,
  rtf: null,
  words: [],
  blendError: null,
  lastError: null,
  spoken: 0,
};

const player = new StreamPlayer(onPlayerEvent);
let speaking = null; // AbortController of the utterance under way
let recording = null; // {stop()} while the microphone records
let clipRecorded = null; // a recorded clip (WAV Blob) waiting to be registered
let resultUrl = null;
let inventory = null; // /health's voice inventory last seen: a change reloads the voice list

// --- errors and announcements ------------------------------------------------------------------------------------

function describe(error) {
  if (error instanceof ApiError) return error.code && !error.code.startsWith("http_") ? `${error.message} (${error.code})` : error.message;
  return error?.message || String(error);
}

function recordError(where, error) {
  state.lastError = {
    where,
    status: error instanceof ApiError ? error.status : null,
    code: error instanceof ApiError ? error.code : error?.name || "error",
    message: error?.message || String(error),
  };
}

function say(element, text) {
  element.textContent = text;
}

// --- API key dialog ------------------------------------------------------------------------------------------------

let keyPrompt = null;

function askForKey(reason) {
  if (keyPrompt) return keyPrompt; // several requests may hit 401 at once: one dialog answers them all
  const dialog = $("key-dialog");
  say($("key-reason"), reason || "This server asks for an API key.");
  $("key-input").value = "";
  keyPrompt = new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        keyPrompt = null;
        const key = $("key-input").value.trim();
        resolve(dialog.returnValue === "save" && key ? key : null);
        showKeyStatus();
      },
      { once: true },
    );
  });
  dialog.showModal();
  $("key-input").focus();
  return keyPrompt;
}

function showKeyStatus() {
  $("key-status").hidden = !apiKey();
}

// --- server status -------------------------------------------------------------------------------------------------

async function pollHealth() {
  try {
    const response = await fetch(url("health"), { cache: "no-store" });
    if (!response.ok) throw await errorFrom(response);
    const health = await response.json();
    state.health = health;
    renderHealth(health);
    const seen = JSON.stringify([health.voices?.ids, health.voices?.builtin]);
    if (inventory !== null && seen !== inventory) loadVoices();
    inventory = seen;
  } catch (error) {
    const summary = $("status-summary");
    summary.dataset.state = "unreachable";
    say(summary, `Server unreachable: ${describe(error)}`);
  } finally {
    setTimeout(pollHealth, document.hidden ? HIDDEN_HEALTH_PERIOD_MS : HEALTH_PERIOD_MS);
  }
}

function renderHealth(health) {
  const summary = $("status-summary");
  summary.dataset.state = health.status;
  const device = health.device && health.device !== "undecided" ? ` on ${health.device}` : "";
  const text = {
    ready: `Ready: ${health.default_engine}${device}`,
    warming: `Warming up: loading ${health.default_engine}…`,
    failed: `Failed: ${health.reason || "the default engine did not load"}`,
  }[health.status] || `Status: ${health.status}`;
  say(summary, text);

  const resident = new Set((health.resident || []).map((r) => r.engine));
  const list = $("engines");
  list.replaceChildren(
    ...Object.entries(health.engines || {}).map(([name, engine]) => {
      const item = document.createElement("li");
      item.dataset.state = engine.state;
      const label = engine.state === "idle" ? "not loaded" : engine.state;
      const where = [engine.backend, engine.device].filter((v) => v && !String(v).includes("undecided")).join(", ");
      item.textContent = `${name}: ${label}${where ? ` (${where})` : ""}${resident.has(name) ? ", resident" : ""}`;
      if (engine.reason) {
        const reason = document.createElement("span");
        reason.className = "reason";
        reason.textContent = engine.reason;
        item.append(" — ", reason);
      }
      return item;
    }),
  );
  const queue = health.inflight || {};
  say($("queue"), `Queue: ${queue.running ?? 0} running, ${queue.waiting ?? 0} waiting (${queue.queued_chars ?? 0} characters)`);
  const max = health.limits?.max_text_chars;
  if (max) $("text").maxLength = max;
  updateTextCount();
  renderCloneEngines();
}

// --- voices --------------------------------------------------------------------------------------------------------

async function loadVoices(select = null) {
  try {
    const body = await getJson("voices");
    state.voices = body.voices || [];
  } catch (error) {
    recordError("voices", error);
    say($("voice-hint"), `Could not list voices: ${describe(error)}`);
    return;
  }
  renderVoices(select ?? $("voice").value);
}

function languageName(code) {
  return LANGUAGES[code] || code;
}

function voiceLabel(voice) {
  if (voice.builtin) return voice.voice_id;
  const what = voice.kind === "pack" ? "voice pack" : voice.ref_text ? `“${truncate(voice.ref_text, 32)}”` : "clip";
  return `${voice.voice_id} · ${what}${voice.servable === false ? " (engine not served here)" : ""}`;
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

function renderVoices(selected) {
  const groups = new Map();
  const add = (label, voice) => {
    if (!groups.has(label)) groups.set(label, []);
    groups.get(label).push(voice);
  };
  const builtins = state.voices.filter((v) => v.builtin).sort((a, b) => a.voice_id.localeCompare(b.voice_id));
  for (const voice of builtins) add(`${languageName(voice.language) || "Other"} · built-in ${voice.engine}`, voice);
  for (const voice of state.voices.filter((v) => !v.builtin)) add(`Registered · ${voice.engine}`, voice);

  const select = $("voice");
  select.replaceChildren(
    ...[...groups.entries()].map(([label, voices]) => {
      const group = document.createElement("optgroup");
      group.label = label;
      group.append(
        ...voices.map((voice) => {
          const option = new Option(voiceLabel(voice), voice.voice_id);
          option.disabled = voice.servable === false;
          return option;
        }),
      );
      return group;
    }),
  );
  const ids = new Set(state.voices.filter((v) => v.servable !== false).map((v) => v.voice_id));
  const fallback = PREFERRED_VOICES.find((id) => ids.has(id)) || builtins[0]?.voice_id || [...ids][0] || "";
  select.value = ids.has(selected) ? selected : fallback;
  if (!state.voices.length) say($("voice-hint"), "No voices yet: the default engine may still be loading.");
  onVoiceChange();
}

function selectedVoice() {
  return state.voices.find((v) => v.voice_id === $("voice").value) || null;
}

function onVoiceChange() {
  const voice = selectedVoice();
  $("delete-voice").disabled = !voice || voice.builtin;
  $("add-to-blend").disabled = !voice || voice.engine !== "kokoro";
  if (voice) {
    const lang = voice.language ? ` Its language: ${languageName(voice.language)}.` : "";
    say($("voice-hint"), `${voice.builtin ? "Built-in" : "Registered"} ${voice.engine} voice.${lang}`);
  }
  checkBlend();
  renderParams();
}

function addToBlend() {
  const voice = selectedVoice();
  if (!voice) return;
  const blend = $("blend");
  blend.value = blend.value.trim() ? `${blend.value.trim()}+${voice.voice_id}(1)` : `${voice.voice_id}(1)`;
  checkBlend();
  renderParams();
  blend.focus();
}

async function deleteVoice() {
  const voice = selectedVoice();
  if (!voice || voice.builtin) return;
  if (!window.confirm(`Delete voice ${voice.voice_id} (${voice.engine})? This removes it from the server.`)) return;
  say($("add-error"), "");
  try {
    const response = await request(`voices/${encodeURIComponent(voice.voice_id)}`, { method: "DELETE" });
    if (!response.ok) throw await errorFrom(response);
    say($("add-status"), `Deleted voice ${voice.voice_id}.`);
    await loadVoices();
    $("voice").focus();
  } catch (error) {
    recordError("delete", error);
    say($("add-error"), `Could not delete ${voice.voice_id}: ${describe(error)}`);
  }
}

// --- blend formula -------------------------------------------------------------------------------------------------

// Checks the formula as it is typed: the grammar first (the server's), then that each name is a Kokoro voice here.
function checkBlend() {
  const input = $("blend");
  const check = $("blend-check");
  const formula = input.value;
  state.blendError = null;
  if (!formula.trim()) {
    input.removeAttribute("aria-invalid");
    check.className = "check";
    say(check, "");
    return null;
  }
  let parts;
  try {
    parts = parseBlend(formula);
    const kokoro = new Set(state.voices.filter((v) => v.engine === "kokoro").map((v) => v.voice_id));
    const unknown = parts.findIndex((p) => kokoro.size && !kokoro.has(p.name));
    if (unknown >= 0) {
      throw new BlendError(parts[unknown].name, unknown, `no Kokoro voice '${parts[unknown].name}' on this server`);
    }
  } catch (error) {
    if (!(error instanceof BlendError)) throw error;
    state.blendError = { part: error.part, index: error.index, message: error.message };
    input.setAttribute("aria-invalid", "true");
    check.className = "check error";
    say(check, error.message);
    return null;
  }
  input.removeAttribute("aria-invalid");
  check.className = "check ok";
  say(check, `OK: ${parts.map((p) => `${p.name} ${(p.weight * 100).toFixed(1)} %`).join(" + ")}`);
  return parts;
}

// --- engine parameters ---------------------------------------------------------------------------------------------

function currentEngine() {
  if ($("blend").value.trim()) return "kokoro";
  return selectedVoice()?.engine || state.health?.default_engine || "kokoro";
}

function renderParams() {
  const engine = currentEngine();
  const fields = $("params-fields");
  if (fields.dataset.engine === engine) return; // keep what the user set
  fields.dataset.engine = engine;
  const properties = state.features.engines[engine]?.parameters?.properties || {};
  say($("params-legend"), `${engine} parameters`);
  fields.replaceChildren(...Object.entries(properties).map(([name, schema]) => paramField(name, schema)));
  $("params").hidden = fields.childElementCount === 0;
}

function paramField(name, schema) {
  const wrap = document.createElement("div");
  wrap.className = "field param";
  const id = `param-${name}`;
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = schema.title || name;
  let input;
  const type = schema.type || (schema.anyOf || []).map((s) => s.type).find((t) => t && t !== "null");
  if (Array.isArray(schema.enum)) {
    input = document.createElement("select");
    input.append(...schema.enum.map((v) => new Option(String(v), String(v))));
    if (schema.default !== undefined) input.value = String(schema.default);
  } else if (type === "boolean") {
    wrap.classList.add("checkbox");
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = Boolean(schema.default);
  } else {
    input = document.createElement("input");
    const bounded = schema.minimum !== undefined && schema.maximum !== undefined;
    input.type = bounded ? "range" : "number";
    if (schema.minimum !== undefined) input.min = schema.minimum;
    if (schema.maximum !== undefined) input.max = schema.maximum;
    input.step = type === "integer" ? 1 : bounded ? (schema.maximum - schema.minimum) / 150 : "any";
    input.value = schema.default ?? schema.minimum ?? 0;
  }
  input.id = id;
  input.dataset.param = name;
  input.dataset.kind = Array.isArray(schema.enum) ? "enum" : type;
  if (schema.default !== undefined) input.dataset.default = String(schema.default);
  const described = [];
  if (schema.description) {
    const help = document.createElement("span");
    help.className = "hint";
    help.id = `${id}-help`;
    help.textContent = schema.description;
    described.push(help);
    input.setAttribute("aria-describedby", help.id);
  }
  if (input.type === "range") {
    const output = document.createElement("output");
    output.htmlFor = id;
    const show = () => (output.textContent = Number(input.value).toFixed(type === "integer" ? 0 : 2));
    input.addEventListener("input", show);
    show();
    wrap.append(label, input, output, ...described);
  } else if (input.type === "checkbox") {
    wrap.append(input, label, ...described);
  } else {
    wrap.append(label, input, ...described);
  }
  return wrap;
}

// The parameters that differ from the engine's defaults (the server fills in the rest).
function paramValues() {
  const values = {};
  for (const input of $("params-fields").querySelectorAll("[data-param]")) {
    const kind = input.dataset.kind;
    const value = kind === "boolean" ? input.checked : kind === "enum" ? input.value : Number(input.value);
    if (input.dataset.default === undefined || String(value) !== input.dataset.default) values[input.dataset.param] = value;
  }
  return values;
}

// --- speaking ------------------------------------------------------------------------------------------------------

function updateTextCount() {
  const text = $("text");
  const max = text.maxLength > 0 ? ` of ${text.maxLength}` : "";
  say($("text-count"), `${text.value.length}${max} characters`);
}

function buildRequest() {
  const text = $("text").value;
  if (!text.trim()) {
    say($("speak-error"), "Type some text to speak.");
    $("text").focus();
    return null;
  }
  const body = { text };
  if ($("blend").value.trim()) {
    if (!checkBlend()) {
      say($("speak-error"), `Fix the blend formula first: ${state.blendError.message}`);
      $("blend").focus();
      return null;
    }
    body.voice_id = $("blend").value.trim();
  } else if ($("voice").value) {
    body.voice_id = $("voice").value;
  }
  if ($("language").value) body.language = $("language").value;
  return { ...body, ...paramValues() };
}

function resetUtterance(body, transport) {
  Object.assign(state, {
    phase: "requesting", transport, request: body, engine: currentEngine(), voiceId: body.voice_id ?? null,
    sampleRate: null, cache: null, bytesReceived: 0, samplesReceived: 0, samplesScheduled: 0, samplesPlayed: 0,
    underruns: 0, playback: "idle", ttfaMs: null, totalMs: null, audioSeconds: null, rtf: null, words: [],
  });
}

async function speak() {
  if (speaking) return;
  say($("speak-error"), "");
  const body = buildRequest();
  if (!body) return;
  const transport = $("transport").value;
  resetUtterance(body, transport);
  const engine = state.features.engines[state.engine];
  player.prime(engine?.sample_rate || 24000); // inside the click: lets the browser start audio output
  speaking = new AbortController();
  setSpeaking(true);
  say($("speak-status"), "Requesting…");
  const started = performance.now();
  const chunks = [];
  const assembler = new PcmAssembler();
  const receive = async (bytes, sampleRate) => {
    if (state.ttfaMs === null) {
      state.ttfaMs = performance.now() - started;
      state.sampleRate = sampleRate;
      state.phase = "streaming";
      say($("speak-status"), "Playing as it streams…");
      await player.open(sampleRate);
      state.audioContext = player.contextState;
    }
    state.bytesReceived += bytes.length;
    const samples = assembler.push(bytes);
    if (samples.length === 0) return;
    chunks.push(samples);
    state.samplesReceived += samples.length;
    state.samplesScheduled += player.push(samples);
    state.playback = "playing";
  };
  try {
    const stream = transport === "ws" ? streamLive : streamHttp;
    state.cache = (await stream(body, receive, speaking.signal)) ?? null;
    player.end();
    state.totalMs = performance.now() - started;
    state.audioSeconds = state.sampleRate ? state.samplesReceived / state.sampleRate : 0;
    state.rtf = state.audioSeconds > 0 ? state.totalMs / 1000 / state.audioSeconds : null;
    state.phase = "done";
    state.spoken += 1;
    showResult(chunks);
  } catch (error) {
    player.clear();
    if (speaking.signal.aborted) {
      state.phase = "stopped";
      say($("speak-status"), "Stopped.");
    } else {
      state.phase = "error";
      recordError("speak", error);
      say($("speak-status"), "");
      say($("speak-error"), describe(error));
    }
  } finally {
    speaking = null;
    setSpeaking(false);
  }
}

// POST /tts/stream: raw s16le as it is generated; the rate is in X-Sample-Rate. Resolves to X-Cache.
async function streamHttp(body, receive, signal) {
  const response = await postJson("tts/stream", body, { signal });
  if (!response.ok) throw await errorFrom(response);
  const sampleRate = Number(response.headers.get("X-Sample-Rate")) || 24000;
  const reader = response.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    await receive(value, sampleRate);
  }
  if (state.samplesReceived === 0) throw new ApiError(response.status, "no_audio", "the server sent no audio");
  return response.headers.get("X-Cache");
}

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// The live WebSocket: request options in the query, the text and then the end of the text as JSON, audio back as
// binary s16le frames and JSON events (start, words, done, error). A browser cannot set Authorization on a WebSocket, so the key goes
// as a subprotocol `bearer.<base64url(key)>` next to `polytts`.
function streamLive(body, receive, signal) {
  const { text, ...options } = body;
  const address = url(`tts/live/ws?${new URLSearchParams(Object.entries(options).map(([k, v]) => [k, String(v)]))}`);
  address.protocol = address.protocol === "https:" ? "wss:" : "ws:";
  const key = apiKey();
  let sampleRate = state.features.engines[state.engine]?.sample_rate || 24000;
  return new Promise((resolve, reject) => {
    const socket = key ? new WebSocket(address, ["polytts", `bearer.${base64url(key)}`]) : new WebSocket(address);
    socket.binaryType = "arraybuffer";
    let finished = false;
    let pending = Promise.resolve(); // frames are handled in order, each after the previous one
    const fail = (error) => {
      finished = true;
      socket.close();
      reject(error);
    };
    signal.addEventListener("abort", () => fail(new DOMException("stopped", "AbortError")));
    let opened = false;
    socket.onopen = () => {
      opened = true;
      socket.send(JSON.stringify({ text }));
      socket.send(JSON.stringify({ end: true }));
    };
    socket.onmessage = ({ data }) => {
      if (typeof data !== "string") {
        pending = pending.then(() => receive(new Uint8Array(data), sampleRate));
        return;
      }
      const event = JSON.parse(data);
      if (event.sample_rate) sampleRate = Number(event.sample_rate);
      if (event.type === "words") {
        state.words.push(...(event.words || []).map((w) => (typeof w === "string" ? w : w.word)));
        const words = $("words");
        words.hidden = false;
        say(words, state.words.join(" "));
      } else if (event.type === "done") {
        finished = true;
        pending.then(() => {
          socket.close(1000);
          resolve(null);
        }, reject);
      } else if (event.type === "error") {
        fail(new ApiError(event.status ?? 0, event.code || "error", event.message || "the live stream failed"));
      }
    };
    socket.onclose = (event) => {
      if (finished) return;
      finished = true;
      // A refused handshake (a wrong key: 401, a draining node: 503) reaches a browser only as a close before open.
      reject(
        event.code === 1008 || !opened
          ? new ApiError(401, "unauthorized", "the node refused the live WebSocket: a wrong API key, or it is draining")
          : new ApiError(0, "live_closed", `the live WebSocket closed before the speech was done (code ${event.code})`),
      );
    };
  });
}

function stop() {
  speaking?.abort();
  player.clear();
  state.playback = "idle";
}

function setSpeaking(on) {
  $("speak").disabled = on;
  $("stop").disabled = !on;
  $("progress").hidden = false;
  if (on) {
    $("metrics").hidden = true;
    $("downloads").hidden = true;
    $("words").hidden = true;
    $("progress").value = 0;
  }
}

function onPlayerEvent(event) {
  state.samplesPlayed = event.played;
  state.underruns = event.underruns;
  if (event.type === "drained") state.playback = "drained";
  const total = state.phase === "done" ? state.samplesReceived : Math.max(state.samplesReceived, 1);
  $("progress").value = Math.min(1, event.played / total);
  if (event.type === "drained" && state.phase === "done") say($("speak-status"), "Done.");
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(2)} s`;
}

function showResult(chunks) {
  say($("m-ttfa"), seconds(state.ttfaMs));
  say($("m-rtf"), state.rtf === null ? "–" : state.rtf.toFixed(2));
  say($("m-audio"), `${state.audioSeconds.toFixed(2)} s`);
  say($("m-total"), seconds(state.totalMs));
  say($("m-engine"), `${state.engine}, ${state.sampleRate / 1000} kHz`);
  say($("m-cache"), state.cache || "–");
  $("metrics").hidden = false;
  say(
    $("speak-status"),
    `Received ${state.audioSeconds.toFixed(1)} s of audio; first audio after ${seconds(state.ttfaMs)}, ` +
      `real-time factor ${state.rtf?.toFixed(2) ?? "–"}.`,
  );

  if (resultUrl) URL.revokeObjectURL(resultUrl);
  resultUrl = URL.createObjectURL(wavBlob(chunks, state.sampleRate));
  const link = $("download-wav");
  link.href = resultUrl;
  link.download = `${fileStem()}.wav`;
  $("replay").src = resultUrl;
  const formats = state.features.formats;
  $("encoded").hidden = formats.length === 0;
  if (formats.length && $("download-format").options.length !== formats.length) {
    $("download-format").replaceChildren(...formats.map((f) => new Option(f.toUpperCase(), f)));
  }
  $("downloads").hidden = false;
}

function fileStem() {
  const voice = (state.voiceId || "default").replace(/[^A-Za-z0-9_.-]+/g, "_").slice(0, 48);
  return `polytts-${voice}-${new Date().toISOString().replace(/[:.]/g, "-")}`;
}

// The same request as the one spoken, encoded by the server (POST /tts with `format`): every engine parameter kept,
// and the synthesis comes from the server's cache rather than the GPU.
async function downloadEncoded() {
  const format = $("download-format").value;
  const button = $("download-encoded");
  button.disabled = true;
  say($("speak-error"), "");
  try {
    const response = await postJson("tts", { ...state.request, format });
    if (!response.ok) throw await errorFrom(response);
    const link = document.createElement("a");
    link.href = URL.createObjectURL(await response.blob());
    link.download = `${fileStem()}.${format}`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  } catch (error) {
    recordError("download", error);
    say($("speak-error"), `Could not download ${format.toUpperCase()}: ${describe(error)}`);
  } finally {
    button.disabled = false;
  }
}

// --- adding voices -------------------------------------------------------------------------------------------------

function cloneEngines() {
  const served = state.health?.serves || Object.keys(state.features.engines);
  return served.filter((name) => state.features.engines[name]?.clone ?? name !== "kokoro");
}

function renderCloneEngines() {
  const select = $("clip-engine");
  const engines = cloneEngines();
  if (select.dataset.engines === engines.join()) return;
  select.dataset.engines = engines.join();
  const current = select.value;
  select.replaceChildren(...(engines.length ? engines.map((name) => new Option(name, name)) : [new Option("none on this server", "")]));
  if (engines.includes(current)) select.value = current;
  select.disabled = $("clip-submit").disabled = engines.length === 0;
  say($("clip-engine-hint"), engines.length ? "" : "No engine on this server clones a voice from a clip.");
}

async function toggleRecording() {
  const button = $("record");
  say($("add-error"), "");
  if (!recording) {
    try {
      recording = await startRecording();
    } catch (error) {
      recordError("record", error);
      say($("add-error"), `The microphone could not be opened: ${describe(error)}`);
      return;
    }
    button.setAttribute("aria-pressed", "true");
    button.textContent = "Stop recording";
    say($("record-status"), "Recording… speak the transcript, then stop.");
    return;
  }
  const active = recording;
  recording = null;
  button.setAttribute("aria-pressed", "false");
  button.textContent = "Record with the microphone";
  try {
    clipRecorded = await active.stop();
  } catch (error) {
    recordError("record", error);
    say($("add-error"), `The recording could not be read: ${describe(error)}`);
    return;
  }
  $("clip-file").value = "";
  const preview = $("clip-preview");
  if (preview.src) URL.revokeObjectURL(preview.src);
  preview.src = URL.createObjectURL(clipRecorded);
  preview.hidden = false;
  say($("record-status"), `Recorded ${(clipRecorded.size / 1024).toFixed(0)} KiB of WAV.`);
}

function onClipFile() {
  clipRecorded = null;
  $("clip-preview").hidden = true;
  say($("record-status"), "");
}

async function register(form, fields, describeVoice) {
  say($("add-error"), "");
  say($("add-status"), "Uploading…");
  const submit = form.querySelector("button[type=submit]");
  submit.disabled = true;
  try {
    const data = new FormData();
    for (const [name, value] of fields) data.append(name, ...value);
    const response = await request("voices", { method: "POST", body: data });
    if (!response.ok) throw await errorFrom(response);
    const { voice_id: voiceId, created } = await response.json();
    $("blend").value = "";
    await loadVoices(voiceId);
    say($("add-status"), `${created ? "Registered" : "Already registered:"} ${describeVoice} ${voiceId}. It is selected: press Speak.`);
    form.reset();
    onClipFile();
    $("speak").focus();
  } catch (error) {
    recordError("register", error);
    say($("add-status"), "");
    say($("add-error"), `Not registered: ${describe(error)}`);
  } finally {
    submit.disabled = false;
  }
}

function registerClip(event) {
  event.preventDefault();
  const file = $("clip-file").files[0];
  const clip = clipRecorded ? [clipRecorded, "recording.wav"] : file ? [file, file.name] : null;
  if (!clip) {
    say($("add-error"), "Choose a clip file or record one first.");
    $("clip-file").focus();
    return;
  }
  const xvec = $("clip-xvec").checked;
  const transcript = $("clip-transcript").value.trim();
  if (!xvec && !transcript) {
    say($("add-error"), "Type the clip's transcript, or tick “Timbre only”.");
    $("clip-transcript").focus();
    return;
  }
  const engine = $("clip-engine").value;
  register(
    $("clip-form"),
    [["audio", clip], ["ref_text", [transcript]], ["engine", [engine]], ["x_vector_only_mode", [String(xvec)]]],
    `${engine} voice`,
  );
}

function registerPack(event) {
  event.preventDefault();
  const file = $("pack-file").files[0];
  if (!file) {
    say($("add-error"), "Choose a voice pack file first.");
    $("pack-file").focus();
    return;
  }
  register($("pack-form"), [["voice_pack", [file, file.name]], ["engine", ["kokoro"]]], "Kokoro voice pack");
}

// --- start ---------------------------------------------------------------------------------------------------------

function renderTransports() {
  const live = Object.values(state.features.engines).some((engine) => engine.live);
  const option = $("transport").querySelector("option[value=ws]");
  option.disabled = !live;
  say($("transport-hint"), live ? "" : "The live WebSocket is not offered by this server.");
}

async function start() {
  onKeyNeeded(askForKey);
  showKeyStatus();
  $("speak-form").addEventListener("submit", (event) => {
    event.preventDefault();
    speak();
  });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      speak();
    }
  });
  $("text").addEventListener("input", updateTextCount);
  $("stop").addEventListener("click", stop);
  $("voice").addEventListener("change", onVoiceChange);
  $("blend").addEventListener("input", () => {
    checkBlend();
    renderParams();
  });
  $("add-to-blend").addEventListener("click", addToBlend);
  $("delete-voice").addEventListener("click", deleteVoice);
  $("download-encoded").addEventListener("click", downloadEncoded);
  $("clip-form").addEventListener("submit", registerClip);
  $("pack-form").addEventListener("submit", registerPack);
  $("clip-file").addEventListener("change", onClipFile);
  $("forget-key").addEventListener("click", () => {
    setApiKey(null);
    showKeyStatus();
  });
  const record = $("record");
  if (canRecord()) record.addEventListener("click", toggleRecording);
  else {
    record.disabled = true;
    say($("record-status"), "Recording needs a secure page (https or localhost).");
  }
  updateTextCount();

  pollHealth();
  try {
    state.features = await detectFeatures();
  } catch (error) {
    recordError("features", error);
  }
  renderTransports();
  renderCloneEngines();
  await loadVoices();
}

window.polytts = { state, parseBlend, speak, stop };
start();
