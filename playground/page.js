// What every part of the playground shares: the page's state (exposed as `window.polytts.state` for tests: what
// the page did, samples received and scheduled, timings, last error), element lookup, and how errors are shown.

import { ApiError } from "./api.js";

export const $ = (id) => document.getElementById(id);

export const state = {
  health: null,
  features: { engines: {}, languages: [], formats: [] }, // what the server offers (features.js), once read
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
  words: [], // the utterance's timed words, {word, start, end} in seconds of its audio
  highlighted: -1, // the index of the word being spoken, -1 when none is
  position: 0, // seconds into the utterance of what is heard, by the audio clock
  level: 0, // the level meter, 0 to 1, and its highest value during this utterance
  levelPeak: 0,
  preview: null, // the last voice preview: {voiceId, phase: requesting | playing | ended | error, cache}
  pronunciation: null, // the last try (pronounce.js): {mode, phase, lexiconId, request, bytes, error}
  blendError: null,
  lastError: null,
  spoken: 0,
};

export function describe(error) {
  if (error instanceof ApiError) return error.code && !error.code.startsWith("http_") ? `${error.message} (${error.code})` : error.message;
  return error?.message || String(error);
}

export function recordError(where, error) {
  state.lastError = {
    where,
    status: error instanceof ApiError ? error.status : null,
    code: error instanceof ApiError ? error.code : error?.name || "error",
    message: error?.message || String(error),
  };
}

export function say(element, text) {
  element.textContent = text;
}
