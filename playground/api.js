// Talking to the service: every URL relative to the service root (the page lives at <root>/ui/), an API key
// asked for on a 401 and kept in this tab's session storage only, errors as {status, code, message, detail}.

const KEY_STORAGE = "polytts.apiKey";

export const root = new URL("../", document.baseURI);

export function url(path) {
  return new URL(path, root);
}

export class ApiError extends Error {
  constructor(status, code, message, detail = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

// The service's {code, message} body, or OpenAI's {error: {code, message}} on /v1.
export async function errorFrom(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status line says it all
  }
  const error = body && typeof body.error === "object" ? body.error : body;
  if (error && error.message) return new ApiError(response.status, error.code || "error", error.message, error.detail);
  return new ApiError(response.status, `http_${response.status}`, `${response.status} ${response.statusText}`);
}

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

let askForKey = async () => null;

// `ask(reason)` resolves to a key to retry with, or null to give up; the app shows its dialog.
export function onKeyNeeded(ask) {
  askForKey = ask;
}

// fetch() with the key attached; on 401 it asks for a key and retries until one works or the user gives up.
export async function request(path, init = {}) {
  for (;;) {
    const headers = new Headers(init.headers);
    const key = apiKey();
    if (key) headers.set("Authorization", `Bearer ${key}`);
    const response = await fetch(url(path), { ...init, headers });
    if (response.status !== 401) return response;
    const error = await errorFrom(response);
    const newKey = await askForKey(key ? "That key was not accepted." : error.message);
    if (!newKey) throw error;
    setApiKey(newKey);
  }
}

export async function getJson(path, init = {}) {
  const response = await request(path, init);
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

export function postJson(path, body, init = {}) {
  return request(path, {
    ...init,
    method: "POST",
    headers: { "Content-Type": "application/json", ...init.headers },
    body: JSON.stringify(body),
  });
}
