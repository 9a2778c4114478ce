// Speaking: the request built from the form, its audio played as it streams (POST /tts/stream or the live
// WebSocket) or once whole with its word timings (POST /tts with `timestamps`), the words read along as they are
// spoken, what it measured, and the result to replay or download (WAV from the samples, or encoded by the server).

import { ApiError, apiKey, errorFrom, postJson, url } from "./api.js";
import { $, describe, recordError, say, state } from "./page.js";
import { paramValues } from "./params.js";
import { PcmAssembler, StreamPlayer } from "./player.js";
import { addWords, follow, halt, resetReadAlong } from "./playing.js";
import { checkBlend, currentEngine } from "./voices.js";
import { wavBlob } from "./wav.js";

export const player = new StreamPlayer(onPlayerEvent);
let speaking = null; // AbortController of the utterance under way
let resultUrl = null;

// --- the form ------------------------------------------------------------------------------------------------------

export function updateTextCount() {
  const text = $("text");
  const max = text.maxLength > 0 ? ` of ${text.maxLength}` : "";
  say($("text-count"), `${text.value.length}${max} characters`);
}

// The languages the server accepts (GET /engines), after the form's "Server default".
export function renderLanguages() {
  const select = $("language");
  const current = select.value;
  select.replaceChildren(
    select.options[0],
    ...state.features.languages.map((language) => new Option(language.name, language.code)),
  );
  select.value = current;
}

const TRANSPORT_HINTS = {
  ws: "/tts/live/ws: plays as it is made, the words read along (Kokoro voices).",
  timed: "POST /tts with timestamps: the whole file first, then it plays with the words read along (Kokoro voices).",
  http: "POST /tts/stream: plays as it is made, without word timings.",
};

// The live WebSocket when the server offers it (it streams and reads along), else the HTTP stream.
export function renderTransports() {
  const live = Object.values(state.features.engines).some((engine) => engine.live);
  const select = $("transport");
  select.querySelector("option[value=ws]").disabled = !live;
  select.value = live ? "ws" : "http";
  showTransportHint();
}

function showTransportHint() {
  const live = !$("transport").querySelector("option[value=ws]").disabled;
  const unoffered = live ? "" : " The live WebSocket is not offered by this server.";
  say($("transport-hint"), `${TRANSPORT_HINTS[$("transport").value]}${unoffered}`);
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
    underruns: 0, playback: "idle", ttfaMs: null, totalMs: null, audioSeconds: null, rtf: null,
  });
  resetReadAlong();
}

// --- streaming -----------------------------------------------------------------------------------------------------

export async function speak() {
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
      follow(player);
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
    const stream = { http: streamHttp, timed: streamTimed, ws: streamLive }[transport];
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
    halt();
    state.playback = "idle";
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

// POST /tts with `timestamps`: the whole audio (raw s16le, base64, in JSON) and when each word is spoken.
async function streamTimed(body, receive, signal) {
  const response = await postJson("tts", { ...body, timestamps: true, format: "pcm" }, { signal });
  if (!response.ok) throw await errorFrom(response);
  const timed = await response.json();
  addWords(timed.words);
  await receive(Uint8Array.from(atob(timed.audio), (ch) => ch.charCodeAt(0)), timed.sample_rate);
  if (state.samplesReceived === 0) throw new ApiError(response.status, "no_audio", "the server sent no audio");
  return response.headers.get("X-Cache");
}

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// The live WebSocket: request options in the query, the text and then the end of the text as JSON, audio back as
// binary s16le frames and JSON events (start, words after each phrase's audio, done, error). A browser cannot set
// Authorization on a WebSocket, so the key goes as a subprotocol `bearer.<base64url(key)>` next to `polytts`.
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
        pending = pending.then(() => addWords(event.words || [])); // in order with the audio frames before it
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

export function stop() {
  speaking?.abort();
  player.clear();
  halt();
  state.playback = "idle";
  updateStop();
}

// Stop stays offered while the audio already received plays out after its stream has ended.
function updateStop() {
  $("stop").disabled = !speaking && state.playback !== "playing";
}

function setSpeaking(on) {
  $("speak").disabled = on;
  updateStop();
  $("playback").hidden = false;
  if (on) {
    $("metrics").hidden = true;
    $("downloads").hidden = true;
    $("progress").value = 0;
  }
}

function onPlayerEvent(event) {
  state.samplesPlayed = event.played;
  state.underruns = event.underruns;
  if (event.type === "drained") {
    state.playback = "drained";
    halt();
    updateStop();
  }
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

export function initSpeaking() {
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
  $("transport").addEventListener("change", showTransportHint);
  $("download-encoded").addEventListener("click", downloadEncoded);
  updateTextCount();
}
