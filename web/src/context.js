// Fitting a conversation into the model's context.  The server counts the
// real tokens (usage.prompt_tokens); the page estimates before sending, from
// the characters per token that the conversation's last reply measured, and
// leaves out the oldest turns (never the system prompt, never the message
// being answered) until the estimate leaves room for the reply.  When the
// estimate was short and the server answers that the prompt does not fit,
// the page leaves out one more turn and asks again.

export const DEFAULT_CPT = 3.0; // characters per token before anything is measured
const PER_MESSAGE = 6;          // template tokens around each message (role markers)

export function estimateTokens(text, cpt) {
  return Math.ceil((text || '').length / (cpt || DEFAULT_CPT)) + PER_MESSAGE;
}

// Tokens kept free for the reply: max_tokens if set, else a quarter of the
// context (at most 1024).
export function reserveFor(ctx, maxTokens) {
  if (maxTokens > 0) return Math.min(maxTokens, ctx - 1);
  return Math.max(1, Math.min(1024, Math.floor(ctx / 4)));
}

// api: the API messages in order (a system message first, if any).  Returns
// the index (into api) of the first non-system message to keep: 0 or 1 when
// everything fits.  Whole turns go: a user message with the replies after it.
export function fitStart(api, ctx, reserve, cpt, extraDrop = 0) {
  const sys = api.length && api[0].role === 'system' ? 1 : 0;
  const cost = api.map((m) => estimateTokens(typeof m.content === 'string' ? m.content : JSON.stringify(m.content), cpt));
  const budget = ctx - reserve;
  let total = cost.reduce((a, b) => a + b, 0);
  let start = sys;
  let dropped = 0;
  const last = api.length - 1; // the message being answered stays
  while (start < last && (total > budget || dropped < extraDrop)) {
    // drop one turn: the message at start and every non-user message after it
    do {
      total -= cost[start];
      start++;
    } while (start < last && api[start].role !== 'user');
    dropped++;
  }
  return start;
}

// The server's "does not fit" answer, as kiln words it today:
//   "the prompt has N tokens; the context holds M, leaving no room to generate"
//   "the prompt (N tokens) plus max_tokens (K) is T tokens, more than the context of M tokens"
// Returns {prompt, ctx} or null.
export function parseOverflow(message) {
  const s = String(message || '');
  let m = /prompt has (\d+) tokens; the context holds (\d+)/.exec(s);
  if (m) return { prompt: +m[1], ctx: +m[2] };
  m = /prompt \((\d+) tokens\).*more than the context of (\d+)/.exec(s);
  if (m) return { prompt: +m[1], ctx: +m[2] };
  if (/context/i.test(s) && /(exceed|too long|does not fit|no room)/i.test(s)) return { prompt: 0, ctx: 0 };
  return null;
}
