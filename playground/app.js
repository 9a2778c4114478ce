// The PolyTTS playground: pick or blend a voice, speak as the audio streams, try a pronunciation (pronounce.js), add
// and delete voices, watch /health, list this key's jobs (jobs.js) and play their audio.
// Speaking lives in speak.js, voices in voices.js; this module shows the server's status, asks for an API key,
// and starts the page. `window.polytts.state` exposes what the page did (samples received and scheduled, timings,
// the word highlighted, last error) for tests, and `window.polytts.player` its audio context.

import { apiKey, errorFrom, onKeyNeeded, setApiKey, url } from "./api.js";
import { parseBlend } from "./blend.js";
import { detectFeatures } from "./features.js";
import { initJobs, loadJobs } from "./jobs.js";
import { $, describe, recordError, say, state } from "./page.js";
import { initPronunciation } from "./pronounce.js";
import { initSpeaking, player, renderLanguages, renderTransports, speak, stop, updateTextCount } from "./speak.js";
import { initVoices, loadVoices, renderCloneEngines } from "./voices.js";

const HEALTH_PERIOD_MS = 2000;
const HIDDEN_HEALTH_PERIOD_MS = 15000; // a background tab polls less

let inventory = null; // /health's voice inventory last seen: a change reloads the voice list

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

// /health is public: with keys on, a caller without a valid key gets its public view (no default engine, device or
// queue details), so the key is sent once there is one, never asked for here.
async function pollHealth() {
  try {
    const key = apiKey();
    const headers = key ? { Authorization: `Bearer ${key}` } : {};
    const response = await fetch(url("health"), { cache: "no-store", headers });
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

// The default engine, or in the public view (which names none) the engines in the node's state.
function statusEngines(health) {
  if (health.default_engine) return health.default_engine;
  const engines = Object.entries(health.engines || {}).filter(([, engine]) => engine.state === health.status);
  return engines.map(([name]) => name).join(", ");
}

function renderHealth(health) {
  const summary = $("status-summary");
  summary.dataset.state = health.status;
  const engines = statusEngines(health);
  const device = health.device && health.device !== "undecided" ? ` on ${health.device}` : "";
  const text = {
    ready: engines ? `Ready: ${engines}${device}` : "Ready",
    warming: engines ? `Warming up: loading ${engines}…` : "Warming up…",
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
  const queue = health.inflight || health.load || {};
  const chars = queue.queued_chars === undefined ? "" : ` (${queue.queued_chars} characters)`;
  say($("queue"), `Queue: ${queue.running ?? 0} running, ${queue.waiting ?? 0} waiting${chars}`);
  const max = health.limits?.max_text_chars;
  if (max) $("text").maxLength = max;
  updateTextCount();
  renderCloneEngines();
}

// --- start ---------------------------------------------------------------------------------------------------------

async function start() {
  onKeyNeeded(askForKey);
  showKeyStatus();
  $("forget-key").addEventListener("click", () => {
    setApiKey(null);
    showKeyStatus();
  });
  initSpeaking();
  initVoices();
  initJobs();
  initPronunciation();

  pollHealth();
  try {
    state.features = await detectFeatures();
  } catch (error) {
    recordError("features", error);
  }
  renderLanguages();
  renderTransports();
  renderCloneEngines();
  await loadVoices();
  await loadJobs();
}

window.polytts = { state, parseBlend, player, speak, stop };
start();
