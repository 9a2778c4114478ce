// What is playing, shown as it plays: the words of the utterance with the one being spoken highlighted (read-along),
// and a level meter. Both follow the player's audio clock frame by frame, not the arrival of the audio, so a
// suspended or stopped player holds or clears them; a word's times are seconds of the utterance's audio.

import { $, state } from "./page.js";

// Text without spaces between its words: the server times it by clause, and its clauses join without a space.
const UNSPACED = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\u3000-\u303f\uff00-\uffef]/u;

let player = null; // the StreamPlayer followed while a frame is requested
let frame = null;
let spans = [];

export function resetReadAlong() {
  halt();
  spans = [];
  state.words = [];
  state.levelPeak = 0;
  $("words").replaceChildren();
  $("words").hidden = true;
}

// Words of the utterance as the server timed them ({word, start, end}), in order; more may come while it plays.
export function addWords(words) {
  const view = $("words");
  for (const word of words) {
    const previous = state.words.at(-1)?.word;
    if (previous && !(UNSPACED.test(previous.at(-1)) && UNSPACED.test(word.word[0]))) view.append(" ");
    const span = document.createElement("span");
    span.textContent = word.word;
    spans.push(span);
    state.words.push({ word: word.word, start: word.start, end: word.end });
    view.append(span);
  }
  view.hidden = state.words.length === 0;
}

// Follow `streamPlayer` until halt(): each animation frame highlights the word at its position and shows its level.
export function follow(streamPlayer) {
  player = streamPlayer;
  frame ??= requestAnimationFrame(update);
}

// Playback stopped or played out: no word is being spoken, nothing is heard.
export function halt() {
  if (frame !== null) cancelAnimationFrame(frame);
  frame = null;
  player = null;
  highlight(-1);
  showLevel(0);
}

function update() {
  const seconds = player.position();
  state.position = seconds;
  highlight(wordAt(seconds));
  showLevel(player.level());
  frame = requestAnimationFrame(update);
}

// The word being spoken `seconds` into the audio: the last one started by then (in the pause after a word, that
// word), or -1 before the first.
function wordAt(seconds) {
  let index = -1;
  while (index + 1 < state.words.length && state.words[index + 1].start <= seconds) index += 1;
  return index;
}

function highlight(index) {
  const current = state.highlighted ?? -1;
  if (index === current) return;
  spans.forEach((span, i) => {
    span.classList.toggle("spoken", index >= 0 && i < index);
    if (i === index) span.setAttribute("aria-current", "true");
    else span.removeAttribute("aria-current");
  });
  state.highlighted = index;
}

function showLevel(level) {
  state.level = level;
  state.levelPeak = Math.max(state.levelPeak ?? 0, level);
  $("level").value = level;
}
