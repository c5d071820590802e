// Conversations in the browser's localStorage: an index of summaries
// ("kiln.index") and one entry per conversation ("kiln.conv.ID"), so a
// save writes one conversation, not all of them.
//
// A conversation: { v, id, title, model, created, updated, system,
//   params: {temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed},
//   messages: [{ id, role: 'user'|'assistant', content, reasoning?, tools?,
//                attachments?, stats?, error?, stopped?, finish?, keptFrom?,
//                dropped? }] }

const INDEX = 'kiln.index';
const PREFIX = 'kiln.conv.';
export const FORMAT = 'kiln-chat';

export function uid() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export function listConversations() {
  try {
    const a = JSON.parse(localStorage.getItem(INDEX) || '[]');
    return Array.isArray(a) ? a.sort((x, y) => y.updated - x.updated) : [];
  } catch {
    return [];
  }
}

export function loadConversation(id) {
  try {
    const c = JSON.parse(localStorage.getItem(PREFIX + id) || 'null');
    return c && Array.isArray(c.messages) ? c : null;
  } catch {
    return null;
  }
}

function summary(c) {
  return { id: c.id, title: c.title, model: c.model, updated: c.updated, n: c.messages.length };
}

// Returns null on success, else the reason (the storage is full).
export function saveConversation(c) {
  const index = listConversations().filter((e) => e.id !== c.id);
  index.push(summary(c));
  try {
    localStorage.setItem(PREFIX + c.id, JSON.stringify(c));
    localStorage.setItem(INDEX, JSON.stringify(index));
    return null;
  } catch (e) {
    return 'the browser storage is full: delete or export some conversations (' + (e.name || e) + ')';
  }
}

export function deleteConversation(id) {
  localStorage.removeItem(PREFIX + id);
  localStorage.setItem(INDEX, JSON.stringify(listConversations().filter((e) => e.id !== id)));
}

export function newConversation(model, defaults) {
  const now = Date.now();
  return {
    v: 1, id: uid(), title: '', model: model || '', created: now, updated: now,
    system: defaults.system || '', params: { ...(defaults.params || {}) }, messages: [],
  };
}

export function exportJSON(c) {
  return JSON.stringify({ format: FORMAT, version: 1, conversation: c }, null, 2);
}

// A file written by exportJSON (or a bare conversation object).  Returns
// the conversation under a new id, or throws with the reason.
export function importJSON(text) {
  const j = JSON.parse(text);
  const c = j && j.format === FORMAT ? j.conversation : j;
  if (!c || !Array.isArray(c.messages)) throw new Error('not a kiln conversation (no "messages" array)');
  const msgs = c.messages.filter((m) => m && (m.role === 'user' || m.role === 'assistant'))
    .map((m) => ({ ...m, id: m.id || uid(), content: typeof m.content === 'string' ? m.content : '' }));
  const now = Date.now();
  return {
    v: 1, id: uid(), title: String(c.title || 'Imported chat'), model: String(c.model || ''),
    created: c.created || now, updated: now, system: String(c.system || ''),
    params: c.params && typeof c.params === 'object' ? c.params : {}, messages: msgs,
  };
}

export function getPref(k, d) {
  try {
    const v = JSON.parse(localStorage.getItem('kiln.pref.' + k));
    return v === null ? d : v;
  } catch {
    return d;
  }
}

export function setPref(k, v) {
  try { localStorage.setItem('kiln.pref.' + k, JSON.stringify(v)); } catch { /* full: preferences are optional */ }
}
