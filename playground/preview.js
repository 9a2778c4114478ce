// A voice heard with one click: a short fixed sentence in the voice's language through POST /tts (a WAV), played
// by an audio element of its own. The same voice and sentence make the same request each time, so every click
// after the first is answered from the server's cache (X-Cache: hit), without the engine.

import { errorFrom, postJson } from "./api.js";
import { $, describe, recordError, say, state } from "./page.js";

// By the primary subtag of the voice's language; a voice without one says the English sentence.
const SAMPLES = {
  en: "Hello! This is how I sound.",
  es: "¡Hola! Así suena mi voz.",
  fr: "Bonjour ! Voici ma voix.",
  it: "Ciao! Questa è la mia voce.",
  pt: "Olá! Esta é a minha voz.",
  hi: "नमस्ते! मेरी आवाज़ ऐसी है।",
  ja: "こんにちは。これが私の声です。",
  zh: "你好！这是我的声音。",
};

const audio = new Audio();
let sampleUrl = null;
let latest = 0; // a click while an earlier sample is still on its way replaces it

function sampleText(language) {
  return SAMPLES[(language || "en").split("-")[0]] || SAMPLES.en;
}

export async function preview(voice) {
  const click = ++latest;
  audio.pause();
  const status = $("preview-status");
  state.preview = { voiceId: voice.voice_id, phase: "requesting", cache: null };
  say(status, `Preview of ${voice.voice_id}: requesting…`);
  try {
    const response = await postJson("tts", { text: sampleText(voice.language), voice_id: voice.voice_id });
    if (!response.ok) throw await errorFrom(response);
    const sample = await response.blob();
    if (click !== latest) return;
    const cache = response.headers.get("X-Cache");
    if (sampleUrl) URL.revokeObjectURL(sampleUrl);
    sampleUrl = URL.createObjectURL(sample);
    audio.src = sampleUrl;
    audio.onended = () => {
      if (click === latest) state.preview.phase = "ended";
    };
    Object.assign(state.preview, { phase: "playing", cache });
    say(status, `Preview of ${voice.voice_id}${cache === "hit" ? " (from the server's cache)" : ""}.`);
    await audio.play();
  } catch (error) {
    if (click !== latest) return;
    state.preview.phase = "error";
    recordError("preview", error);
    say(status, `Could not preview ${voice.voice_id}: ${describe(error)}`);
  }
}
