// The kiln chat page: conversations kept in the browser, streamed replies
// from api/chat (its final line carries the server's own token counts and
// timings, so tokens/s is the server's figure, not the network's), markdown, reasoning, tool-call cards, text and
// image attachments, per-conversation system prompt and sampling settings,
// the context in use against the model's, and a context that overflows.
import { Fragment, render } from 'preact';
import { useEffect, useReducer, useRef, useState } from 'preact/hooks';
import 'katex/dist/katex.min.css';
import './styles.css';
import { api, getJSON, readNDJSON, onKeyNeeded, apiKey, setApiKey } from './api.js';
import * as store from './store.js';
import { renderMarkdown, splitContent } from './markdown.js';
import { fitStart, reserveFor, parseOverflow, DEFAULT_CPT, estimateTokens } from './context.js';
import { Icon } from './icons.jsx';

const PARAMS = [
  // key, label, step, min, max, hint
  ['temperature', 'Temperature', 0.05, 0, 5, 'randomness; 0 = always the likeliest token'],
  ['top_k', 'Top-k', 1, 0, 1000, 'sample from the k likeliest tokens (0 = all)'],
  ['top_p', 'Top-p', 0.01, 0, 1, 'nucleus: the smallest set with this probability'],
  ['min_p', 'Min-p', 0.01, 0, 1, 'drop tokens below this share of the likeliest'],
  ['repeat_penalty', 'Repeat penalty', 0.01, 0, 10, '1 = none'],
  ['max_tokens', 'Max tokens', 1, 1, 1 << 30, 'empty = until the model stops or the context is full'],
  ['seed', 'Seed', 1, -1e15, 1e15, 'empty = a new random seed each reply'],
];
const TEXT_LIMIT = 1 << 20; // bytes of one attached text file
const IMAGE_LIMIT = 8 << 20;

// ---- the app's state, outside of the components ----

const S = {
  models: [],            // ids from v1/models
  info: {},              // model id -> {ctx, train, caps, chat}
  index: store.listConversations(),
  conv: null,            // the open conversation
  busy: null,            // {convId, ctl} while a reply streams
  error: '',             // a page-level message (storage full, server unreachable)
};
let redraw = () => {};

function save(c) {
  c.updated = Date.now();
  const err = store.saveConversation(c);
  S.error = err || (S.error.startsWith('the browser storage') ? '' : S.error);
  S.index = store.listConversations();
  if (c === S.conv) store.setPref('open', c.id);
}

function defaults() {
  return store.getPref('defaults', { system: '', params: {} });
}

function openConversation(id) {
  const c = store.loadConversation(id);
  if (!c) return;
  S.conv = c;
  if (c.model && S.models.includes(c.model)) loadInfo(c.model);
  store.setPref('open', id);
  redraw();
}

function newChat(model) {
  const m = model || (S.conv && S.conv.model) || S.models[0] || '';
  if (S.conv && !S.conv.messages.length) {
    S.conv.model = m;
  } else {
    S.conv = store.newConversation(m, defaults());
  }
  if (m) loadInfo(m);
  redraw();
}

// Choosing another model: an empty conversation takes it; one with messages
// stays with its model (it is in the list) and a new conversation starts,
// unless its model is no longer served, when it carries on with the new one.
function chooseModel(m) {
  const c = S.conv;
  if (c && c.messages.length && S.models.includes(c.model) && c.model !== m) {
    S.conv = store.newConversation(m, { system: c.system, params: c.params });
  } else if (c) {
    c.model = m;
    if (c.messages.length) save(c);
  }
  store.setPref('model', m);
  loadInfo(m);
  redraw();
}

async function loadModels() {
  try {
    const j = await getJSON('v1/models');
    // models to chat with: text generation (capabilities as Ollama's api/show names them)
    S.models = (j.data || []).filter((d) => !d.capabilities || d.capabilities.includes('completion')).map((d) => d.id);
    S.error = '';
  } catch (e) {
    S.models = [];
    S.error = 'Cannot list the models: ' + e.message;
  }
  const last = store.getPref('open', null);
  if (!S.conv && last) openConversation(last);
  if (!S.conv) newChat(store.getPref('model', null) && S.models.includes(store.getPref('model')) ? store.getPref('model') : S.models[0]);
  else if (!S.conv.model && S.models.length) S.conv.model = S.models[0];
  if (S.conv && S.conv.model && S.models.includes(S.conv.model)) loadInfo(S.conv.model);
  redraw();
}

// The model's context as the server runs it (api/ps, once loaded) and
// what it can do (api/show: chat template, capabilities).
async function loadInfo(m, refresh) {
  const have = S.info[m];
  if (have && !refresh) return have;
  const info = have || { ctx: 0, train: 0, caps: [], chat: true };
  S.info[m] = info;
  try {
    const show = await getJSON('api/show', { method: 'POST', body: { model: m } });
    info.caps = show.capabilities || [];
    info.chat = !!show.template;
    const mi = show.model_info || {};
    const k = Object.keys(mi).find((x) => x.endsWith('.context_length'));
    if (k) info.train = mi[k];
  } catch { /* an older server: keep the guesses */ }
  try {
    const ps = await getJSON('api/ps');
    const e = (ps.models || []).find((x) => x.name === m || x.model === m);
    if (e && e.context_length) info.ctx = e.context_length;
  } catch { /* ditto */ }
  if (!info.ctx && info.train) info.ctx = info.train;
  redraw();
  return info;
}

// ---- generation ----

// A user message for api/chat: attached text files follow the text as
// fenced blocks; images go as base64 in "images" (models that accept them).
function userMessage(m, withImages) {
  let content = m.content || '';
  const images = [];
  for (const a of m.attachments || []) {
    if (a.kind === 'text') content += `\n\n[File: ${a.name}]\n\`\`\`\n${a.text}\n\`\`\``;
    else if (a.kind === 'image' && withImages) images.push(a.url.replace(/^data:[^,]*,/, ''));
  }
  return images.length ? { role: 'user', content, images } : { role: 'user', content };
}

// The API messages for the conversation up to (not including) index end,
// and for each the index of the conversation message it came from.
function apiMessages(c, end, withImages) {
  const out = [];
  const src = [];
  if (c.system.trim()) { out.push({ role: 'system', content: c.system }); src.push(-1); }
  for (let i = 0; i < end; i++) {
    const m = c.messages[i];
    if (m.role === 'user') out.push(userMessage(m, withImages));
    else if (!m.error && (m.content || m.tools?.length)) {
      const a = { role: 'assistant', content: m.content || '' };
      out.push(a);
    } else continue;
    src.push(i);
  }
  return { out, src };
}

// The conversation's settings as api/chat options (max_tokens is num_predict).
function options(c) {
  const o = {};
  for (const [k] of PARAMS) {
    const v = c.params[k];
    if (v !== '' && v !== null && v !== undefined && !Number.isNaN(Number(v))) o[k === 'max_tokens' ? 'num_predict' : k] = Number(v);
  }
  return o;
}

// What one version of a reply holds (regenerate keeps the earlier ones).
const VERSION_FIELDS = ['content', 'reasoning', 'tools', 'stats', 'error', 'stopped', 'finish', 'dropped', 'keptFrom'];
function snapshot(m) {
  const v = {};
  for (const k of VERSION_FIELDS) if (m[k] !== undefined) v[k] = m[k];
  return v;
}

function showVersion(m, vi) {
  for (const k of VERSION_FIELDS) delete m[k];
  Object.assign(m, m.versions[vi]);
  m.vi = vi;
  save(S.conv);
  redraw();
}

async function generate(c, versions) {
  if (S.busy) return;
  const target = { id: store.uid(), role: 'assistant', content: '', reasoning: '', tools: [], pending: true };
  if (versions) target.versions = versions;
  const end = c.messages.length;
  c.messages.push(target);
  const ctl = new AbortController();
  S.busy = { convId: c.id, ctl };
  redraw();
  const t0 = performance.now();
  let tFirst = 0;
  let chunks = 0;
  let final = null;
  let sent = [];
  try {
    const info = c.model ? await loadInfo(c.model) : { ctx: 0, caps: [] };
    const { out, src } = apiMessages(c, end, info.caps.includes('vision'));
    const o = options(c);
    let ctx = info.ctx;
    let cpt = c.cpt || DEFAULT_CPT;
    let extra = 0;
    let start = out.length && out[0].role === 'system' ? 1 : 0;
    const sysN = start;
    let resp = null;
    for (let attempt = 0; attempt < 12 && !resp; attempt++) {
      if (ctx) start = fitStart(out, ctx, reserveFor(ctx, o.num_predict), cpt, extra);
      sent = [...out.slice(0, sysN), ...out.slice(start)];
      const body = { model: c.model, messages: sent, stream: true, options: o };
      try {
        resp = await api('api/chat', { method: 'POST', body, signal: ctl.signal });
      } catch (e) {
        const ov = e.status === 400 ? parseOverflow(e.message) : null;
        if (!ov || start >= out.length - 1) {
          if (ov) throw new Error(`This message does not fit in the model's context${ov.ctx ? ` of ${ov.ctx} tokens` : ''}`
            + `${ov.prompt ? ` (it needs ${ov.prompt})` : ''}: shorten it, its attachments or the system prompt. (${e.message})`);
          throw e;
        }
        if (ov.ctx) { ctx = ov.ctx; info.ctx = ov.ctx; }
        if (ov.prompt) { // the estimate was short: learn from the count
          const est = sent.reduce((n, m) => n + estimateTokens(m.content, cpt), 0);
          if (ov.prompt > est) cpt = Math.max(0.5, cpt * est / ov.prompt);
        }
        extra++;
      }
    }
    if (!resp) throw new Error('the conversation could not be fitted into the context');
    target.keptFrom = start < src.length ? src[start] : end;
    target.dropped = start - sysN;
    await readNDJSON(resp, (j) => {
      if (j.error) throw new Error(typeof j.error === 'string' ? j.error : j.error.message);
      const m = j.message || {};
      if (m.content || m.thinking || m.tool_calls) {
        if (!tFirst) tFirst = performance.now();
        chunks++;
      }
      if (m.content) target.content += m.content;
      if (m.thinking) target.reasoning += m.thinking;
      for (const t of m.tool_calls || []) {
        const a = t.function?.arguments;
        target.tools.push({ name: t.function?.name || '?', args: typeof a === 'string' ? a : JSON.stringify(a ?? {}) });
      }
      if (j.done) {
        final = j;
        if (j.done_reason === 'length') target.finish = 'length';
      }
      scheduleRedraw();
    });
    // what was measured: characters per token, for the next estimate
    if (final && final.prompt_eval_count) {
      const chars = sent.reduce((n, m) => n + m.content.length, 0);
      const body = final.prompt_eval_count - 6 * sent.length;
      if (body > 8 && chars > 0) c.cpt = Math.min(8, Math.max(0.5, chars / body));
    }
  } catch (e) {
    if (e.name === 'AbortError') target.stopped = true;
    else target.error = e.message || String(e);
  }
  const ms = Math.round(performance.now() - t0);
  if (final) {
    const evalS = (final.eval_duration || 0) / 1e9;
    target.stats = {
      tokens: final.eval_count, prompt: final.prompt_eval_count ?? null, ms,
      ttft: tFirst ? Math.round(tFirst - t0) : null,
      tps: final.eval_count > 0 && evalS > 0 ? final.eval_count / evalS : null,
      promptTps: final.prompt_eval_duration > 0 ? final.prompt_eval_count / (final.prompt_eval_duration / 1e9) : null,
    };
    c.ctxUsed = (final.prompt_eval_count || 0) + (final.eval_count || 0);
  } else if (chunks) {
    target.stats = { tokens: chunks, prompt: null, ms, ttft: tFirst ? Math.round(tFirst - t0) : null, tps: null, approx: true };
  }
  delete target.pending;
  if (target.versions) {
    target.versions.push(snapshot(target));
    target.vi = target.versions.length - 1;
  }
  S.busy = null;
  if (!c.title) c.title = titleOf(c);
  save(c);
  if (c.model) loadInfo(c.model, true);
  redraw();
}

function titleOf(c) {
  const u = c.messages.find((m) => m.role === 'user');
  const t = (u ? u.content || (u.attachments || []).map((a) => a.name).join(', ') : '').replace(/\s+/g, ' ').trim();
  return t.length > 48 ? t.slice(0, 47) + '…' : t || 'New chat';
}

let pendingFrame = 0;
function scheduleRedraw() {
  if (pendingFrame) return;
  pendingFrame = requestAnimationFrame(() => { pendingFrame = 0; redraw(); });
}

function send(text, attachments) {
  const c = S.conv;
  if (!c || S.busy) return;
  c.messages.push({ id: store.uid(), role: 'user', content: text, attachments: attachments.length ? attachments : undefined });
  if (!c.title) c.title = titleOf(c);
  save(c);
  generate(c);
}

function regenerate() {
  const c = S.conv;
  if (!c || S.busy) return;
  let versions = null;
  while (c.messages.length && c.messages[c.messages.length - 1].role === 'assistant') {
    const old = c.messages.pop();
    if (!versions) versions = old.versions ? [...old.versions] : [snapshot(old)];
  }
  if (!c.messages.length) return;
  generate(c, versions);
}

function editAndResend(i, text) {
  const c = S.conv;
  if (!c || S.busy) return;
  c.messages[i] = { ...c.messages[i], content: text };
  c.messages.length = i + 1;
  save(c);
  generate(c);
}

function download(name, text) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  a.download = name;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

function exportConversation(id) {
  const c = store.loadConversation(id);
  if (!c) return;
  const slug = (c.title || 'chat').toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 40) || 'chat';
  download(`kiln-${slug}.json`, store.exportJSON(c));
}

async function importFiles(files) {
  for (const f of files) {
    try {
      const c = store.importJSON(await f.text());
      save(c);
      S.conv = c;
    } catch (e) {
      S.error = `${f.name}: ${e.message}`;
    }
  }
  redraw();
}

// ---- components ----

function Sidebar({ open, onClose }) {
  const [renaming, setRenaming] = useState(null);
  const [confirmDel, setConfirmDel] = useState(null);
  const importRef = useRef();
  const finishRename = (id, title) => {
    const c = S.conv && S.conv.id === id ? S.conv : store.loadConversation(id);
    if (c && title.trim()) { c.title = title.trim(); save(c); }
    setRenaming(null);
    redraw();
  };
  const remove = (id) => {
    store.deleteConversation(id);
    S.index = store.listConversations();
    if (S.conv && S.conv.id === id) { S.conv = null; newChat(); }
    setConfirmDel(null);
    redraw();
  };
  return (
    <aside class={'sidebar' + (open ? ' open' : '')}>
      <div class="side-head">
        <span class="brand">kiln</span>
        <button class="btn primary new-chat" onClick={() => { newChat(); onClose(); }}><Icon name="plus" /> New chat</button>
      </div>
      <nav class="conv-list" aria-label="Conversations">
        {S.index.length === 0 && <p class="muted small pad">No saved conversations yet.</p>}
        {S.index.map((e) => (
          <div key={e.id} class={'conv-item' + (S.conv && S.conv.id === e.id ? ' active' : '')} data-id={e.id}>
            {renaming === e.id ? (
              <input class="rename" value={e.title} autoFocus aria-label="New title"
                onKeyDown={(ev) => {
                  if (ev.key === 'Enter') finishRename(e.id, ev.currentTarget.value);
                  if (ev.key === 'Escape') setRenaming(null);
                }}
                onBlur={(ev) => finishRename(e.id, ev.currentTarget.value)} />
            ) : (
              <button class="conv-open" onClick={() => { openConversation(e.id); onClose(); }} title={e.title}>
                <span class="conv-title">{e.title || 'New chat'}</span>
                <span class="conv-meta">{e.model || 'no model'} · {when(e.updated)}</span>
              </button>
            )}
            <div class="conv-actions">
              <button class="icon-btn" title="Rename" aria-label="Rename" onClick={() => setRenaming(e.id)}><Icon name="edit" size={15} /></button>
              <button class="icon-btn" title="Export as JSON" aria-label="Export" onClick={() => exportConversation(e.id)}><Icon name="download" size={15} /></button>
              {confirmDel === e.id
                ? <button class="btn danger tiny" onClick={() => remove(e.id)} onBlur={() => setConfirmDel(null)} autoFocus>Delete?</button>
                : <button class="icon-btn" title="Delete" aria-label="Delete" onClick={() => setConfirmDel(e.id)}><Icon name="trash" size={15} /></button>}
            </div>
          </div>
        ))}
      </nav>
      <div class="side-foot">
        <button class="btn ghost" onClick={() => importRef.current.click()}><Icon name="upload" size={16} /> Import</button>
        <input ref={importRef} type="file" accept=".json,application/json" multiple hidden class="import-input"
          onChange={(ev) => { importFiles([...ev.currentTarget.files]); ev.currentTarget.value = ''; onClose(); }} />
        <ThemeButton />
        <button class="btn ghost" title="API key" onClick={() => changeKey()}><Icon name="key" size={16} /></button>
      </div>
      <a class="licenses muted small" href="assets/licenses.txt" target="_blank" rel="noopener">Licenses</a>
    </aside>
  );
}

function when(t) {
  const d = new Date(t);
  const now = new Date();
  if (d.toDateString() === now.toDateString()) return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  return d.toLocaleDateString([], { month: 'short', day: 'numeric' });
}

function applyTheme(t) {
  document.documentElement.dataset.theme = t;
}

function ThemeButton() {
  const [t, setT] = useState(store.getPref('theme', 'auto'));
  const next = { auto: 'light', light: 'dark', dark: 'auto' };
  return (
    <button class="btn ghost theme-btn" title={`Theme: ${t}`} aria-label={`Theme: ${t}`}
      onClick={() => { const n = next[t]; setT(n); store.setPref('theme', n); applyTheme(n); }}>
      <Icon name={t === 'light' ? 'sun' : t === 'dark' ? 'moon' : 'auto'} size={16} /> {t}
    </button>
  );
}

function ContextMeter({ c }) {
  const info = S.info[c.model] || {};
  const ctx = info.ctx || 0;
  const used = c.ctxUsed || 0;
  const pct = ctx ? Math.min(100, (100 * used) / ctx) : 0;
  const title = ctx
    ? `${used} of the ${ctx} tokens of context in use after the last reply`
      + (info.train && info.train !== ctx ? ` (the model was trained for ${info.train})` : '')
    : 'context size not known yet';
  return (
    <div class="ctx" title={title} aria-label={title}>
      <div class="ctx-bar"><div class={'ctx-fill' + (pct > 90 ? ' hot' : '')} style={{ width: pct + '%' }} /></div>
      <span class="ctx-text">{used || '–'} / {ctx || '?'}</span>
    </div>
  );
}

function Header({ onMenu, onSettings }) {
  const c = S.conv;
  return (
    <header class="top">
      <button class="icon-btn menu-btn" aria-label="Conversations" onClick={onMenu}><Icon name="menu" /></button>
      <div class="title" title={c?.title}>{c?.title || 'New chat'}</div>
      <select class="model" aria-label="Model" value={c?.model} disabled={!!S.busy}
        onChange={(e) => chooseModel(e.currentTarget.value)}>
        {c && c.model && !S.models.includes(c.model) && <option value={c.model}>{c.model} (not served)</option>}
        {S.models.map((m) => <option key={m} value={m}>{m}</option>)}
      </select>
      {c && <ContextMeter c={c} />}
      <button class="icon-btn" aria-label="Conversation settings" title="System prompt and sampling" onClick={onSettings}><Icon name="gear" /></button>
    </header>
  );
}

function ThinkBlock({ text, live }) {
  return (
    <details class="think" open={live}>
      <summary>{live ? 'Thinking…' : 'Reasoning'}<span class="muted small"> · {text.length} chars</span></summary>
      <div class="think-body md" dangerouslySetInnerHTML={{ __html: renderMarkdown(text) }} />
    </details>
  );
}

function ToolCard({ name, args, live }) {
  return (
    <div class="tool-card">
      <div class="tool-head"><Icon name="tool" size={15} /> <span>Tool call</span> <code class="tool-name">{name || '…'}</code>{live && <span class="muted small"> writing…</span>}</div>
      <pre class="tool-args">{prettyArgs(args)}</pre>
    </div>
  );
}

function prettyArgs(a) {
  try { return JSON.stringify(JSON.parse(a), null, 2); } catch { return a; }
}

function Attachments({ list }) {
  return (
    <div class="attachments">
      {list.map((a, i) => a.kind === 'image'
        ? <img key={i} class="att-img" src={a.url} alt={a.name} title={a.name} />
        : <span key={i} class="chip" title={`${a.name} · ${a.text.length} chars`}><Icon name="file" size={14} /> {a.name}</span>)}
    </div>
  );
}

function Stats({ s, m }) {
  if (!s) return null;
  const parts = [`${s.approx ? '~' : ''}${s.tokens} tokens`];
  if (s.tps) parts.push(`${s.tps.toFixed(1)} t/s`);
  parts.push(`${(s.ms / 1000).toFixed(1)} s`);
  const tip = [
    s.prompt !== null ? `prompt ${s.prompt} tokens${s.promptTps ? ` at ${s.promptTps.toFixed(0)} t/s` : ''}` : '',
    s.ttft !== null ? `first token after ${s.ttft} ms` : '',
    m.stopped ? 'stopped' : m.finish === 'length' ? 'cut at the token limit' : '',
    s.approx ? 'stopped before the server reported its counts: pieces received' : 'generation speed as the server measured it',
  ].filter(Boolean).join(' · ');
  return <span class="stats" title={tip}>{parts.join(' · ')}</span>;
}

function copyText(text, btn) {
  const done = () => { if (btn) { const o = btn.textContent; btn.textContent = 'Copied'; setTimeout(() => { btn.textContent = o; }, 1200); } };
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text, done));
  else fallbackCopy(text, done);
}

function fallbackCopy(text, done) {
  const t = document.createElement('textarea');
  t.value = text;
  t.style.position = 'fixed';
  t.style.opacity = '0';
  document.body.appendChild(t);
  t.select();
  try { document.execCommand('copy'); } catch { /* nothing more to try */ }
  t.remove();
  done();
}

function Message({ m, i, last, live }) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState('');
  if (m.role === 'user') {
    return (
      <div class="msg user" data-i={i}>
        {editing ? (
          <div class="edit-box">
            <textarea value={draft} onInput={(e) => setDraft(e.currentTarget.value)} rows={Math.min(12, draft.split('\n').length + 1)} aria-label="Edit message" />
            <div class="row end">
              <button class="btn ghost" onClick={() => setEditing(false)}>Cancel</button>
              <button class="btn primary save-resend" disabled={!draft.trim() || !!S.busy}
                onClick={() => { setEditing(false); editAndResend(i, draft); }}>Send</button>
            </div>
          </div>
        ) : (
          <>
            <div class="bubble">
              {m.attachments && <Attachments list={m.attachments} />}
              <div class="user-text">{m.content}</div>
            </div>
            <div class="actions">
              <button class="icon-btn edit-msg" title="Edit and send again" aria-label="Edit" disabled={!!S.busy}
                onClick={() => { setDraft(m.content); setEditing(true); }}><Icon name="edit" size={15} /></button>
              <button class="icon-btn" title="Copy" aria-label="Copy" onClick={(e) => copyText(m.content, e.currentTarget)}><Icon name="copy" size={15} /></button>
            </div>
          </>
        )}
      </div>
    );
  }
  const parts = splitContent(m.content);
  const streamingThink = live && m.reasoning && !m.content;
  return (
    <div class={'msg assistant' + (live ? ' live' : '')} data-i={i}>
      {m.dropped > 0 && (
        <div class="notice overflow-note">
          {m.dropped} earlier message{m.dropped > 1 ? 's' : ''} did not fit in the model's context
          {S.info[S.conv.model]?.ctx ? ` of ${S.info[S.conv.model].ctx} tokens` : ''} and {m.dropped > 1 ? 'were' : 'was'} left out of this reply.
        </div>
      )}
      {m.reasoning && <ThinkBlock text={m.reasoning} live={streamingThink} />}
      {parts.map((p, k) => p.kind === 'think' ? <ThinkBlock key={k} text={p.text} live={live && p.open} />
        : p.kind === 'tool' ? <ToolCard key={k} name={p.name} args={p.args} live={live && p.open} />
          : <div key={k} class="md body" dangerouslySetInnerHTML={{ __html: renderMarkdown(p.text) }} />)}
      {(m.tools || []).map((t, k) => <ToolCard key={'t' + k} name={t.name} args={t.args} live={live} />)}
      {live && !m.content && !m.reasoning && <div class="typing"><span /><span /><span /></div>}
      {m.error && <div class="error" role="alert">{m.error}</div>}
      {m.stopped && <div class="muted small">Stopped.</div>}
      {m.finish === 'length' && !m.stopped && <div class="muted small">The reply reached the token limit.</div>}
      {!live && (
        <div class="actions">
          <button class="icon-btn" title="Copy" aria-label="Copy" onClick={(e) => copyText(m.content, e.currentTarget)}><Icon name="copy" size={15} /></button>
          {last && <button class="icon-btn regen" title="Regenerate" aria-label="Regenerate" disabled={!!S.busy} onClick={regenerate}><Icon name="refresh" size={15} /></button>}
          {m.versions && m.versions.length > 1 && (
            <span class="versions">
              <button class="icon-btn prev-version" aria-label="Previous version" disabled={!!S.busy || m.vi === 0} onClick={() => showVersion(m, m.vi - 1)}>‹</button>
              <span class="version-n">{m.vi + 1}/{m.versions.length}</span>
              <button class="icon-btn next-version" aria-label="Next version" disabled={!!S.busy || m.vi === m.versions.length - 1} onClick={() => showVersion(m, m.vi + 1)}>›</button>
            </span>
          )}
          <Stats s={m.stats} m={m} />
        </div>
      )}
    </div>
  );
}

function Messages() {
  const ref = useRef();
  const stick = useRef(true);
  const c = S.conv;
  useEffect(() => {
    const el = ref.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  });
  const onScroll = () => {
    const el = ref.current;
    stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
  };
  const onClick = (e) => {
    const b = e.target.closest('.copy-code');
    if (b) copyText(b.closest('.code').querySelector('pre').innerText, b);
  };
  if (!c) return <main class="messages" />;
  const live = S.busy && S.busy.convId === c.id;
  let lastA = -1;
  c.messages.forEach((m, i) => { if (m.role === 'assistant') lastA = i; });
  const keptFrom = lastA >= 0 ? c.messages[lastA].keptFrom || 0 : 0;
  const info = S.info[c.model];
  return (
    <main class="messages" ref={ref} onScroll={onScroll} onClick={onClick}>
      <div class="column">
        {!c.messages.length && (
          <div class="empty">
            <h1>kiln</h1>
            <p class="muted">{c.model ? <>Chatting with <b>{c.model}</b>{info && info.ctx ? ` · ${info.ctx} tokens of context` : ''}</> : 'No model is being served.'}</p>
            {info && !info.chat && <p class="muted small">This model has no chat template: it continues your text as written.</p>}
            {c.system && <p class="muted small">System prompt: {c.system.length > 120 ? c.system.slice(0, 120) + '…' : c.system}</p>}
          </div>
        )}
        {c.messages.map((m, i) => (
          <Fragment key={m.id}>
            {i === keptFrom && keptFrom > 0 && <div class="out-of-context"><span>earlier messages are no longer in the model's context</span></div>}
            <Message m={m} i={i} last={i === lastA && i === c.messages.length - 1} live={live && i === c.messages.length - 1 && m.role === 'assistant'} />
          </Fragment>
        ))}
      </div>
    </main>
  );
}

function isText(f, bytes) {
  if (/^text\//.test(f.type) || /json|xml|javascript|yaml|toml|csv|sql|x-sh/.test(f.type)) return true;
  for (let i = 0; i < Math.min(bytes.length, 8192); i++) if (bytes[i] === 0) return false;
  try { new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, 65536)); return true; } catch { return false; }
}

function Composer() {
  const [text, setText] = useState(store.getPref('draft', ''));
  const [att, setAtt] = useState([]);
  const [note, setNote] = useState('');
  const fileRef = useRef();
  const taRef = useRef();
  const c = S.conv;
  const busy = S.busy && c && S.busy.convId === c.id;
  const vision = c && S.info[c.model] && S.info[c.model].caps.includes('vision');
  useEffect(() => {
    const t = taRef.current;
    if (t) { t.style.height = 'auto'; t.style.height = Math.min(t.scrollHeight, 240) + 'px'; }
  });
  const addFiles = async (files) => {
    const add = [];
    const notes = [];
    for (const f of files) {
      if (/^image\//.test(f.type)) {
        if (!vision) { notes.push(`${f.name}: this model does not accept images`); continue; }
        if (f.size > IMAGE_LIMIT) { notes.push(`${f.name}: larger than ${IMAGE_LIMIT >> 20} MiB`); continue; }
        const url = await new Promise((res, rej) => { const r = new FileReader(); r.onload = () => res(r.result); r.onerror = rej; r.readAsDataURL(f); });
        add.push({ kind: 'image', name: f.name, url });
        continue;
      }
      if (f.size > TEXT_LIMIT) { notes.push(`${f.name}: larger than ${TEXT_LIMIT >> 10} KiB`); continue; }
      const bytes = new Uint8Array(await f.arrayBuffer());
      if (!isText(f, bytes)) { notes.push(`${f.name}: not a text file`); continue; }
      add.push({ kind: 'text', name: f.name, text: new TextDecoder().decode(bytes) });
    }
    setAtt((a) => [...a, ...add]);
    setNote(notes.join('; '));
  };
  const submit = (e) => {
    e && e.preventDefault();
    if (busy || S.busy) return;
    const t = text.trim();
    if (!t && !att.length) return;
    if (!c.model) { setNote('no model to send to'); return; }
    send(t, att);
    setText('');
    setAtt([]);
    setNote('');
    store.setPref('draft', '');
  };
  return (
    <form class="composer" onSubmit={submit}
      onDragOver={(e) => e.preventDefault()}
      onDrop={(e) => { e.preventDefault(); addFiles([...e.dataTransfer.files]); }}>
      <div class="column">
        {(att.length > 0 || note) && (
          <div class="pending-att">
            {att.map((a, i) => (
              <span class="chip" key={i}>{a.kind === 'image' ? <img class="chip-img" src={a.url} alt="" /> : <Icon name="file" size={14} />} {a.name}
                <button type="button" class="chip-x" aria-label={`Remove ${a.name}`} onClick={() => setAtt(att.filter((_, k) => k !== i))}><Icon name="x" size={12} /></button>
              </span>
            ))}
            {note && <span class="muted small att-note">{note}</span>}
          </div>
        )}
        <div class="input-row">
          <button type="button" class="icon-btn attach" title={vision ? 'Attach text files or images' : 'Attach text files'} aria-label="Attach files"
            onClick={() => fileRef.current.click()}><Icon name="clip" /></button>
          <input ref={fileRef} type="file" multiple hidden class="file-input"
            onChange={(e) => { addFiles([...e.currentTarget.files]); e.currentTarget.value = ''; }} />
          <textarea ref={taRef} class="prompt" rows={1} value={text} aria-label="Message"
            placeholder={matchMedia('(max-width: 760px)').matches ? 'Message' : 'Message (Enter sends, Shift+Enter for a new line)'}
            onInput={(e) => { setText(e.currentTarget.value); store.setPref('draft', e.currentTarget.value); }}
            onPaste={(e) => { const fs = [...(e.clipboardData?.files || [])]; if (fs.length) { e.preventDefault(); addFiles(fs); } }}
            onKeyDown={(e) => { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); } }} />
          {busy
            ? <button type="button" class="btn danger stop" aria-label="Stop" onClick={() => S.busy.ctl.abort()}><Icon name="stop" /> <span class="label">Stop</span></button>
            : <button type="submit" class="btn primary send" aria-label="Send" disabled={!!S.busy || (!text.trim() && !att.length)}><Icon name="send" /> <span class="label">Send</span></button>}
        </div>
      </div>
    </form>
  );
}

function Settings({ onClose }) {
  const c = S.conv;
  useEffect(() => { // Escape closes the dialog, as its x does
    const onKey = (e) => { if (e.key === 'Escape') { e.stopPropagation(); onClose(); } };
    window.addEventListener('keydown', onKey, true);
    return () => window.removeEventListener('keydown', onKey, true);
  }, [onClose]);
  const [system, setSystem] = useState(c.system);
  const [p, setP] = useState({ ...c.params });
  const [asDefault, setAsDefault] = useState(false);
  const apply = (e) => {
    e.preventDefault();
    c.system = system;
    c.params = {};
    for (const [k] of PARAMS) if (p[k] !== '' && p[k] !== undefined && p[k] !== null) c.params[k] = Number(p[k]);
    if (c.messages.length) save(c);
    if (asDefault) store.setPref('defaults', { system: c.system, params: c.params });
    onClose();
    redraw();
  };
  return (
    <div class="modal-back" onClick={(e) => e.target === e.currentTarget && onClose()}>
      <form class="modal settings" onSubmit={apply} aria-label="Conversation settings">
        <div class="modal-head"><h2>This conversation</h2><button type="button" class="icon-btn" aria-label="Close" onClick={onClose}><Icon name="x" /></button></div>
        <label class="field"><span>System prompt</span>
          <textarea name="system" rows={4} value={system} onInput={(e) => setSystem(e.currentTarget.value)} placeholder="e.g. You are a concise assistant." />
        </label>
        <div class="grid">
          {PARAMS.map(([k, label, step, min, max, hint]) => (
            <label class="field" key={k} title={hint}><span>{label}</span>
              <input name={k} type="number" step={step} min={min} max={max} value={p[k] ?? ''} placeholder="server default"
                onInput={(e) => setP({ ...p, [k]: e.currentTarget.value })} />
              <small class="muted">{hint}</small>
            </label>
          ))}
        </div>
        <label class="check"><input type="checkbox" checked={asDefault} onChange={(e) => setAsDefault(e.currentTarget.checked)} /> Use these for new conversations</label>
        <div class="row end">
          <button type="button" class="btn ghost" onClick={() => { setSystem(''); setP({}); }}>Clear</button>
          <button type="submit" class="btn primary apply">Apply</button>
        </div>
      </form>
    </div>
  );
}

function KeyPrompt({ reason, onDone }) {
  const [k, setK] = useState('');
  return (
    <div class="modal-back">
      <form class="modal key-modal" aria-label="API key" onSubmit={(e) => { e.preventDefault(); onDone(k.trim() || null); }}>
        <div class="modal-head"><h2><Icon name="key" /> API key</h2></div>
        <p>{reason} It is kept in this browser and sent as <code>Authorization: Bearer …</code> with every request.</p>
        <input class="key-input" type="password" autoFocus autocomplete="current-password" value={k} placeholder="the key kiln serve was started with (--api-key)"
          onInput={(e) => setK(e.currentTarget.value)} aria-label="API key" />
        <div class="row end">
          <button type="button" class="btn ghost" onClick={() => onDone(null)}>Cancel</button>
          <button type="submit" class="btn primary" disabled={!k.trim()}>Use this key</button>
        </div>
      </form>
    </div>
  );
}

let keyAsk = null;
function changeKey() {
  if (!keyAsk) return;
  keyAsk(apiKey() ? 'Enter a new key (leave empty and cancel to keep the current one).' : 'Set the key this server asks for.')
    .then((k) => { if (k) { setApiKey(k); loadModels(); } });
}

function App() {
  const [, tick] = useReducer((x) => x + 1, 0);
  const [menu, setMenu] = useState(false);
  const [settings, setSettings] = useState(false);
  const [key, setKey] = useState(null); // {reason, resolve}
  redraw = tick;
  useEffect(() => {
    let queue = Promise.resolve();
    keyAsk = (reason) => {
      // one prompt at a time, however many calls were refused together
      const p = queue.then(() => new Promise((resolve) => setKey({ reason, resolve })));
      queue = p.catch(() => {});
      return p;
    };
    onKeyNeeded(keyAsk);
    loadModels();
  }, []);
  useEffect(() => {
    const onStorage = (e) => {
      if (e.key && e.key.startsWith('kiln.')) {
        S.index = store.listConversations();
        if (S.conv && !S.busy && e.key === 'kiln.conv.' + S.conv.id) S.conv = store.loadConversation(S.conv.id) || S.conv;
        tick();
      }
    };
    const onKey = (e) => { if (e.key === 'Escape' && S.busy) S.busy.ctl.abort(); }; // Esc stops a reply
    window.addEventListener('storage', onStorage);
    window.addEventListener('keydown', onKey);
    return () => { window.removeEventListener('storage', onStorage); window.removeEventListener('keydown', onKey); };
  }, []);
  return (
    <div class="app">
      <Sidebar open={menu} onClose={() => setMenu(false)} />
      {menu && <div class="scrim" onClick={() => setMenu(false)} />}
      <div class="main">
        <Header onMenu={() => setMenu(!menu)} onSettings={() => S.conv && setSettings(true)} />
        {S.error && <div class="banner error" role="alert">{S.error}<button class="icon-btn" aria-label="Dismiss" onClick={() => { S.error = ''; tick(); }}><Icon name="x" size={14} /></button></div>}
        {S.conv && S.conv.model && S.models.length > 0 && !S.models.includes(S.conv.model) && (
          <div class="banner">This conversation used <b>{S.conv.model}</b>, which this server does not serve; choose a model to carry on.</div>
        )}
        <Messages />
        <Composer />
      </div>
      {settings && S.conv && <Settings onClose={() => setSettings(false)} />}
      {key && <KeyPrompt reason={key.reason} onDone={(k) => { const r = key.resolve; setKey(null); r(k); }} />}
    </div>
  );
}

applyTheme(store.getPref('theme', 'auto'));
render(<App />, document.getElementById('app'));
