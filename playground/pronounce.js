// Trying a pronunciation: a lexicon entry (a word said as an alias, or as IPA phonemes) stored through
// POST /lexicons and spoken in a sentence with it (`lexicons`), or an SSML snippet spoken as written; the WAV plays in
// an audio element of its own. A refusal shows what the server says of it and, for SSML that is not well-formed,
// selects the spot it names (line and column) in the snippet.

import { errorFrom, postJson } from "./api.js";
import { $, describe, recordError, say, state } from "./page.js";

let clipUrl = null;
let latest = 0; // a click while an earlier try is on its way replaces it

// What to store: one JSON rule, as POST /lexicons takes it.
function entryRule() {
  const grapheme = $("pron-grapheme").value.trim();
  const said = $("pron-said").value.trim();
  return $("pron-kind").value === "ipa" ? { grapheme, phoneme: said, alphabet: "ipa" } : { grapheme, alias: said };
}

// Where `line` and `column` (both from 1, as the server counts them) fall in `text`.
function offsetOf(text, line, column) {
  const lines = text.split("\n");
  const before = lines.slice(0, line - 1).reduce((total, each) => total + each.length + 1, 0);
  return Math.min(text.length, before + Math.max(0, column - 1));
}

function showMode() {
  const ssml = $("pron-mode").value === "ssml";
  $("pron-entry").hidden = ssml;
  $("pron-ssml-field").hidden = !ssml;
}

async function speechBody(mode) {
  const body = { voice_id: $("voice").value };
  if (mode === "ssml") return { ...body, text: $("pron-ssml").value };
  const rule = entryRule();
  const stored = await postJson("lexicons", [rule]);
  if (!stored.ok) throw await errorFrom(stored);
  const { lexicon_id: lexiconId } = await stored.json();
  state.pronunciation.lexiconId = lexiconId;
  const sentence = $("pron-sentence").value.trim() || `${rule.grapheme}.`;
  return { ...body, text: sentence, lexicons: [lexiconId] };
}

function showError(error, mode) {
  const where = error.detail && Number.isInteger(error.detail.line) ? error.detail : null;
  state.pronunciation.error = {
    status: error.status ?? null,
    code: error.code ?? null,
    message: error.message,
    line: where ? where.line : null,
    column: where ? where.column : null,
  };
  say($("pron-error"), describe(error));
  if (where && mode === "ssml") {
    say($("pron-where"), `Line ${where.line}, column ${where.column} is selected in the snippet.`);
    const snippet = $("pron-ssml");
    const at = offsetOf(snippet.value, where.line, where.column);
    snippet.focus();
    snippet.setSelectionRange(at, Math.min(snippet.value.length, at + 1));
  }
}

export async function tryPronunciation() {
  const attempt = ++latest;
  const mode = $("pron-mode").value;
  const audio = $("pron-audio");
  audio.pause();
  audio.hidden = true;
  state.pronunciation = { mode, phase: "requesting", lexiconId: null, bytes: 0, error: null };
  say($("pron-status"), "Requesting…");
  say($("pron-error"), "");
  say($("pron-where"), "");
  try {
    const body = await speechBody(mode);
    state.pronunciation.request = body;
    const response = await postJson("tts", body);
    if (!response.ok) throw await errorFrom(response);
    const wav = await response.blob();
    if (attempt !== latest) return;
    if (clipUrl) URL.revokeObjectURL(clipUrl);
    clipUrl = URL.createObjectURL(wav);
    audio.src = clipUrl;
    audio.hidden = false;
    audio.onended = () => {
      if (attempt === latest) state.pronunciation.phase = "ended";
    };
    Object.assign(state.pronunciation, { phase: "playing", bytes: wav.size });
    say($("pron-status"), mode === "ssml" ? "Playing the snippet." : "Playing the sentence with the entry.");
    await audio.play();
  } catch (error) {
    if (attempt !== latest) return;
    state.pronunciation.phase = "error";
    recordError("pronunciation", error);
    say($("pron-status"), "");
    showError(error, mode);
  }
}

export function initPronunciation() {
  $("pron-mode").addEventListener("change", showMode);
  $("pron-kind").addEventListener("change", () => {
    $("pron-said").placeholder = $("pron-kind").value === "ipa" ? "kˈoʊkəɹoʊ" : "banana split";
  });
  $("pron-form").addEventListener("submit", (event) => {
    event.preventDefault();
    tryPronunciation();
  });
  showMode();
}
