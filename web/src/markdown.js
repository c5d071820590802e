// Markdown to safe HTML: marked (GitHub-flavoured: tables, task lists,
// strikethrough), KaTeX for $...$, $$...$$, \(...\) and \[...\], highlight.js
// for fenced code (with a copy button), and DOMPurify over the result, so
// nothing the model writes can run script in the page.  Images in a reply
// become links: a model (or a page it read) cannot make the browser fetch
// an address by itself, which would carry data out of the conversation.
import { Marked } from 'marked';
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/common';
import katex from 'katex';

function esc(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

// KaTeX's output needs style attributes, which the sanitizer removes from
// everything else (a style can fetch a url()), so formulas are rendered
// into placeholders and put in after sanitizing.  KaTeX runs untrusted
// (no \href, \includegraphics or raw HTML).
let formulas = [];
function tex(src, display) {
  let html;
  try {
    html = katex.renderToString(src, { displayMode: display, throwOnError: false, output: 'htmlAndMathml', trust: false });
  } catch {
    html = `<code>${esc(src)}</code>`;
  }
  formulas.push(html);
  return `<span data-formula="${formulas.length - 1}"></span>`;
}

// Math as marked extensions, so code spans and blocks keep their dollars.
const mathBlock = {
  name: 'mathBlock',
  level: 'block',
  start(src) { const m = /\$\$|\\\[/.exec(src); return m ? m.index : undefined; },
  tokenizer(src) {
    const m = /^\$\$([\s\S]+?)\$\$[^\S\n]*(?:\n|$)/.exec(src) || /^\\\[([\s\S]+?)\\\][^\S\n]*(?:\n|$)/.exec(src);
    if (m) return { type: 'mathBlock', raw: m[0], text: m[1].trim() };
    return undefined;
  },
  renderer(t) { return `<div class="math">${tex(t.text, true)}</div>`; },
};
const mathInline = {
  name: 'mathInline',
  level: 'inline',
  start(src) { const m = /\$|\\\(/.exec(src); return m ? m.index : undefined; },
  tokenizer(src) {
    // $x$ needs no space inside the dollars and no digit after: "$5 and $6" stays text
    let m = /^\$\$([^$]+?)\$\$/.exec(src);
    if (m) return { type: 'mathInline', raw: m[0], text: m[1], display: true };
    m = /^\$(?!\s)((?:\\\$|[^$\n])+?)(?<!\s)\$(?![0-9])/.exec(src) || /^\\\(([\s\S]+?)\\\)/.exec(src);
    if (m) return { type: 'mathInline', raw: m[0], text: m[1], display: false };
    return undefined;
  },
  renderer(t) { return tex(t.text, t.display); },
};

const marked = new Marked({ gfm: true, breaks: true });
marked.use({
  extensions: [mathBlock, mathInline],
  renderer: {
    image({ href, text }) {
      return `<a href="${esc(href || '')}" class="md-image">[image: ${esc(text || href || '')}]</a>`;
    },
    code({ text, lang }) {
      const name = (lang || '').trim().split(/\s+/)[0].toLowerCase();
      let body;
      if (name && hljs.getLanguage(name)) body = hljs.highlight(text, { language: name, ignoreIllegals: true }).value;
      else if (!name && text.length < 4000) body = hljs.highlightAuto(text).value;
      else body = esc(text);
      return `<div class="code"><div class="code-head"><span>${esc(name || 'text')}</span>`
        + '<button type="button" class="copy-code" title="Copy code">Copy</button></div>'
        + `<pre><code class="hljs">${body}</code></pre></div>`;
    },
  },
});

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

export function renderMarkdown(src) {
  let html;
  formulas = [];
  try {
    html = marked.parse(src || '');
  } catch {
    html = `<p>${esc(src || '')}</p>`;
  }
  const done = formulas;
  formulas = [];
  return sanitize(html).replace(/<span data-formula="(\d+)"><\/span>/g, (m, i) => done[+i] ?? '');
}

function sanitize(html) {
  return DOMPurify.sanitize(html, {
    ADD_ATTR: ['target'],
    FORBID_TAGS: ['img', 'image', 'video', 'audio', 'source', 'picture', 'iframe', 'object', 'embed', 'style', 'form', 'link', 'meta', 'base'],
    FORBID_ATTR: ['style', 'srcset', 'background', 'poster'],
  });
}

// A reply's text as parts: text, reasoning (<think>…</think>, in case the
// server left it in the content) and tool calls (<tool_call>{…}</tool_call>,
// shown as cards).  An unclosed block (still streaming) runs to the end.
export function splitContent(text) {
  const parts = [];
  const re = /<(think|tool_call)>([\s\S]*?)(?:<\/\1>|$)/g;
  let last = 0;
  let m;
  while ((m = re.exec(text || '')) !== null) {
    if (m.index > last) parts.push({ kind: 'text', text: text.slice(last, m.index) });
    const closed = m[0].endsWith(`</${m[1]}>`);
    if (m[1] === 'think') parts.push({ kind: 'think', text: m[2], open: !closed });
    else parts.push({ kind: 'tool', ...parseCall(m[2]), open: !closed });
    last = m.index + m[0].length;
    if (!m[0].length) break;
  }
  if (last < (text || '').length) parts.push({ kind: 'text', text: text.slice(last) });
  return parts.filter((p) => p.kind !== 'text' || p.text.trim());
}

// {"name": ..., "arguments": {...}} as the model wrote it; the raw text
// when it is not (yet) JSON.
export function parseCall(body) {
  const raw = (body || '').trim();
  try {
    const j = JSON.parse(raw);
    const args = j.arguments ?? j.parameters ?? {};
    return { name: String(j.name || '?'), args: typeof args === 'string' ? args : JSON.stringify(args, null, 2) };
  } catch {
    const n = /"name"\s*:\s*"([^"]*)"/.exec(raw);
    return { name: n ? n[1] : '…', args: raw };
  }
}
