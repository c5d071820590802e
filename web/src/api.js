// Calls to kiln serve.  Every call carries the API key (if one is stored)
// as "Authorization: Bearer KEY"; a 401 asks for the key through the
// handler the page installs, stores it and tries again.  URLs are relative
// to the page, so it works behind a proxy's path prefix.

const KEY = 'kiln.key'; // the plain page uses the same
let askKey = null; // (reason) => Promise<string|null>

export function onKeyNeeded(fn) { askKey = fn; }
export function apiKey() { return localStorage.getItem(KEY) || ''; }
export function setApiKey(k) {
  if (k) localStorage.setItem(KEY, k);
  else localStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const k = apiKey();
  if (k) h.Authorization = 'Bearer ' + k;
  return h;
}

// fetch with the key; a 401 asks for a key (at most 3 times per call).
export async function api(path, { method = 'GET', body, signal } = {}) {
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(path, {
      method, signal, headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (r.status !== 401 || !askKey || attempt >= 3) {
      if (!r.ok) {
        const j = await r.json().catch(() => null);
        const msg = (j && (j.error && (j.error.message || j.error))) || `${r.status} ${r.statusText}`;
        throw new ApiError(r.status, typeof msg === 'string' ? msg : JSON.stringify(msg), j);
      }
      return r;
    }
    const k = await askKey(attempt ? 'That key was not accepted.' : 'This server needs an API key.');
    if (!k) throw new ApiError(401, 'an API key is required');
    setApiKey(k);
  }
}

export async function getJSON(path, opts) { return (await api(path, opts)).json(); }

// Reads an SSE response, calling onEvent with each parsed "data:" object
// until [DONE] or the end of the stream.
export async function readSSE(response, onEvent) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
      const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      onEvent(JSON.parse(data));
    }
  }
}

// Reads an NDJSON response (Ollama's streams), calling onEvent per line.
export async function readNDJSON(response, onEvent) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) onEvent(JSON.parse(line));
    }
  }
  if (buf.trim()) onEvent(JSON.parse(buf));
}
