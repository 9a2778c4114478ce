// Voices: the list to speak with (built-in and registered, grouped by language and engine, filtered by language
// and gender, each previewed with one click), the Kokoro blend formula checked as it is typed, deleting a
// registered voice, and adding one from a clip (a file or the microphone) or a Kokoro voice pack.

import { errorFrom, getJson, request } from "./api.js";
import { BlendError, parseBlend } from "./blend.js";
import { $, describe, recordError, say, state } from "./page.js";
import { renderParams } from "./params.js";
import { preview } from "./preview.js";
import { canRecord, startRecording } from "./recorder.js";

const PREFERRED_VOICES = ["af_heart", "jf_alpha"];

let recording = null; // {stop()} while the microphone records
let clipRecorded = null; // a recorded clip (WAV Blob) waiting to be registered

// --- the voice list ------------------------------------------------------------------------------------------------

export async function loadVoices(select = null) {
  try {
    const body = await getJson("voices");
    state.voices = body.voices || [];
  } catch (error) {
    recordError("voices", error);
    say($("voice-hint"), `Could not list voices: ${describe(error)}`);
    return;
  }
  renderFilters();
  renderVoices(select ?? $("voice").value);
}

// A language's name as the server gives it (GET /engines), else its code.
function languageName(code) {
  return state.features.languages.find((language) => language.code === code)?.name || code;
}

function voiceLabel(voice) {
  if (voice.builtin) return voice.voice_id;
  const what = voice.kind === "pack" ? "voice pack" : voice.ref_text ? `“${truncate(voice.ref_text, 32)}”` : "clip";
  return `${voice.voice_id} · ${what}${voice.servable === false ? " (engine not served here)" : ""}`;
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

// The filters offer the languages and genders the listed voices have, keeping the choice while it is still offered.
function renderFilters() {
  const fill = (select, values, label) => {
    const current = select.value;
    select.replaceChildren(select.options[0], ...values.map((value) => new Option(label(value), value)));
    select.value = values.includes(current) ? current : "";
  };
  const distinct = (key) => [...new Set(state.voices.map((v) => v[key]).filter(Boolean))];
  const languages = distinct("language").sort((a, b) => languageName(a).localeCompare(languageName(b)));
  fill($("voice-language"), languages, languageName);
  fill($("voice-gender"), distinct("gender").sort(), (gender) => gender[0].toUpperCase() + gender.slice(1));
}

function shown(voice) {
  const language = $("voice-language").value;
  const gender = $("voice-gender").value;
  return (!language || voice.language === language) && (!gender || voice.gender === gender);
}

function renderVoices(selected) {
  const groups = new Map();
  const add = (label, voice) => {
    if (!groups.has(label)) groups.set(label, []);
    groups.get(label).push(voice);
  };
  const listed = state.voices.filter(shown);
  const builtins = listed.filter((v) => v.builtin).sort((a, b) => a.voice_id.localeCompare(b.voice_id));
  for (const voice of builtins) add(`${languageName(voice.language) || "Other"} · built-in ${voice.engine}`, voice);
  for (const voice of listed.filter((v) => !v.builtin)) add(`Registered · ${voice.engine}`, voice);

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
  if (!listed.length && state.voices.length) {
    const none = new Option("No voice matches the filters", "");
    none.disabled = true;
    select.append(none);
  }
  const ids = new Set(listed.filter((v) => v.servable !== false).map((v) => v.voice_id));
  const fallback = PREFERRED_VOICES.find((id) => ids.has(id)) || builtins[0]?.voice_id || [...ids][0] || "";
  select.value = ids.has(selected) ? selected : fallback;
  const total = state.voices.length;
  say($("voice-count"), listed.length < total ? `${listed.length} of ${total} voices` : `${total} voices`);
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
  $("preview-voice").disabled = !voice || voice.servable === false;
  if (voice) {
    const lang = voice.language ? ` Its language: ${languageName(voice.language)}.` : "";
    const gender = voice.gender ? `${voice.gender} ` : "";
    say($("voice-hint"), `${voice.builtin ? "Built-in" : "Registered"} ${gender}${voice.engine} voice.${lang}`);
  } else if (state.voices.length) {
    say($("voice-hint"), "");
  }
  checkBlend();
  renderParams(currentEngine());
}

// The engine a request made now would go to: a blend is Kokoro's, else the selected voice's, else the default.
export function currentEngine() {
  if ($("blend").value.trim()) return "kokoro";
  return selectedVoice()?.engine || state.health?.default_engine || "kokoro";
}

function addToBlend() {
  const voice = selectedVoice();
  if (!voice) return;
  const blend = $("blend");
  blend.value = blend.value.trim() ? `${blend.value.trim()}+${voice.voice_id}(1)` : `${voice.voice_id}(1)`;
  checkBlend();
  renderParams(currentEngine());
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
export function checkBlend() {
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

// --- adding voices -------------------------------------------------------------------------------------------------

function cloneEngines() {
  const served = state.health?.serves || Object.keys(state.features.engines);
  return served.filter((name) => state.features.engines[name]?.clone);
}

export function renderCloneEngines() {
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

export function initVoices() {
  $("voice").addEventListener("change", onVoiceChange);
  for (const filter of [$("voice-language"), $("voice-gender")]) {
    filter.addEventListener("change", () => renderVoices($("voice").value));
  }
  $("preview-voice").addEventListener("click", () => {
    const voice = selectedVoice();
    if (voice) preview(voice);
  });
  $("blend").addEventListener("input", () => {
    checkBlend();
    renderParams(currentEngine());
  });
  $("add-to-blend").addEventListener("click", addToBlend);
  $("delete-voice").addEventListener("click", deleteVoice);
  $("clip-form").addEventListener("submit", registerClip);
  $("pack-form").addEventListener("submit", registerPack);
  $("clip-file").addEventListener("change", onClipFile);
  const record = $("record");
  if (canRecord()) record.addEventListener("click", toggleRecording);
  else {
    record.disabled = true;
    say($("record-status"), "Recording needs a secure page (https or localhost).");
  }
}
