// The Kokoro blend grammar, checked in the browser as the user types. It follows the server's `parse_blend`
// (engines/kokoro/) rule for rule and message for message (tests/e2e/test_playground.py compares the two), so
// what the page accepts the server accepts, and an error names the same part.

const MAX_PARTS = 8;
const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

const MAX_QUOTED = 100; // a longer part is quoted by its start and its length, as the server quotes it

function excerpt(text) {
  const chars = Array.from(text); // code points, as Python counts a str
  return chars.length <= MAX_QUOTED ? text : `${chars.slice(0, MAX_QUOTED).join("")}… (${chars.length} characters)`;
}

export class BlendError extends Error {
  constructor(part, index, why) {
    const shown = excerpt(part);
    super(`invalid blend part at index ${index} '${shown}': ${why}`);
    this.part = shown;
    this.index = index;
  }
}

// Python's whitespace (str.isspace), which `strip()` and `\s` use there; JS's `\s` differs (it has U+FEFF, lacks
// U+001C-U+001F and U+0085).
const SPACE = "[\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const EDGES = new RegExp(`^${SPACE}+|${SPACE}+$`, "g");
const WEIGHTED = new RegExp(`^([^()]*?)${SPACE}*\\(([^()]*)\\)$`);

function strip(text) {
  return text.replace(EDGES, "");
}

// Split on `+` outside parentheses, so a weight such as `1e+1` stays whole.
function split(formula) {
  const parts = [];
  let current = "";
  let inWeight = false;
  for (const char of formula) {
    if (char === "+" && !inWeight) {
      parts.push(strip(current));
      current = "";
      continue;
    }
    if (char === "(") inWeight = true;
    else if (char === ")") inWeight = false;
    current += char;
  }
  parts.push(strip(current));
  return parts;
}

function parsePart(text, index) {
  if (!text) throw new BlendError(text, index, "empty part (two '+' in a row, or a '+' at either end)");
  let name;
  let weight;
  if (!text.includes("(") && !text.includes(")")) {
    name = text;
    weight = 1;
  } else {
    const match = WEIGHTED.exec(text);
    if (match === null || !NUMBER.test(strip(match[2]))) {
      throw new BlendError(text, index, "write a weighted part as name(number), e.g. af_bella(2)");
    }
    name = match[1];
    weight = Number(strip(match[2]));
  }
  if (!NAME.test(name)) throw new BlendError(text, index, "a voice name is 1-64 letters, digits, '_', '.' or '-'");
  if (!Number.isFinite(weight) || weight <= 0) throw new BlendError(text, index, "a weight must be a finite number above 0");
  return { name, weight };
}

// Parse `name(weight)+name(weight)+...` into parts whose weights sum to 1; throws BlendError.
export function parseBlend(formula) {
  if (!strip(formula)) throw new BlendError("", 0, "the blend formula is empty");
  const texts = split(formula);
  if (texts.length > MAX_PARTS) throw new BlendError(texts[MAX_PARTS], MAX_PARTS, `a blend has at most ${MAX_PARTS} parts`);
  const parts = [];
  texts.forEach((text, index) => {
    const part = parsePart(text, index);
    if (parts.some((p) => p.name === part.name)) throw new BlendError(text, index, `voice '${part.name}' appears twice`);
    parts.push(part);
  });
  // Scale by the largest weight first so that huge weights cannot overflow the sum.
  const largest = Math.max(...parts.map((p) => p.weight));
  const scaled = parts.map((p) => p.weight / largest);
  const total = scaled.reduce((a, b) => a + b, 0);
  return parts.map((p, i) => ({ name: p.name, weight: scaled[i] / total }));
}
