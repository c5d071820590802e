// Starts a real `kiln serve` on 127.0.0.1 with a free port and waits until
// /health answers 200.  KILN_BIN names the binary (ctest sets it).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
export const model = path.join(root, 'models', 'stories260K.gguf');
export const bin = process.env.KILN_BIN || path.join(root, 'build', 'kiln');

// modelPath null: no -m (args may carry their own).
export async function startServer(args = [], env = {}, modelPath = model) {
  const m = modelPath === null ? [] : ['-m', modelPath];
  const proc = spawn(bin, ['serve', ...m, '--host', '127.0.0.1', '--port', '0', ...args], {
    env: { ...process.env, KILN_STORE: path.join(here, '.store'), ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + log)), 20000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${log}`)); });
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    const r = await fetch(base + '/health').catch(() => null);
    if (r && r.status === 200) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  const exited = new Promise((res) => proc.on('exit', (code, sig) => res({ code, sig })));
  return {
    proc, port, base, exited,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      const r = await exited;
      return r.code;
    },
  };
}

export function rssKiB(pid) {
  return import('node:fs').then((fs) => {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+)/.exec(s)[1]);
  });
}

export async function metric(base, name) {
  const t = await (await fetch(base + '/metrics')).text();
  let sum = 0;
  for (const line of t.split('\n')) {
    if (line.startsWith(name + ' ') || line.startsWith(name + '{')) sum += Number(line.split(' ').pop());
  }
  return sum;
}

// Copies the GGUF file src to dst with tokenizer.chat_template set to tmpl
// (replaced or added); the other metadata, the tensor table and the tensor
// data are copied as they are.  GGUF v2/v3: header, key/value pairs, tensor
// infos (offsets relative to the data section), padding to
// general.alignment (32 when absent), data.
export function withChatTemplate(src, dst, tmpl) {
  return import('node:fs').then((fs) => {
    const b = fs.readFileSync(src);
    if (b.toString('latin1', 0, 4) !== 'GGUF' || b.readUInt32LE(4) < 2) throw new Error(`${src}: not GGUF v2+`);
    const nTensors = Number(b.readBigUInt64LE(8)), nKv = Number(b.readBigUInt64LE(16));
    const size = [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8]; // by type id; 8 string, 9 array
    let p = 24, align = 32;
    const str = () => {
      const n = Number(b.readBigUInt64LE(p));
      p += 8 + n;
      return b.toString('utf8', p - n, p);
    };
    const skip = (t) => {
      if (t === 8) str();
      else if (t === 9) {
        const et = b.readUInt32LE(p), n = Number(b.readBigUInt64LE(p + 4));
        p += 12;
        if (et === 8 || et === 9) for (let i = 0; i < n; i++) skip(et);
        else p += n * size[et];
      } else if (t < size.length) p += size[t];
      else throw new Error(`${src}: value type ${t}`);
    };
    const kept = [];
    for (let i = 0; i < nKv; i++) {
      const start = p, key = str(), t = b.readUInt32LE(p);
      p += 4;
      if (key === 'general.alignment') align = b.readUInt32LE(p);
      skip(t);
      if (key !== 'tokenizer.chat_template') kept.push(b.subarray(start, p));
    }
    const infoStart = p;
    for (let i = 0; i < nTensors; i++) { str(); const nd = b.readUInt32LE(p); p += 4 + 8 * nd + 4 + 8; }
    const infos = b.subarray(infoStart, p);
    const data = b.subarray(Math.ceil(p / align) * align);
    const key = Buffer.from('tokenizer.chat_template'), val = Buffer.from(tmpl, 'utf8');
    const kv = Buffer.alloc(8 + key.length + 4 + 8 + val.length);
    kv.writeBigUInt64LE(BigInt(key.length), 0);
    key.copy(kv, 8);
    kv.writeUInt32LE(8, 8 + key.length);
    kv.writeBigUInt64LE(BigInt(val.length), 12 + key.length);
    val.copy(kv, 20 + key.length);
    const head = Buffer.from(b.subarray(0, 24));
    head.writeBigUInt64LE(BigInt(kept.length + 1), 16);
    const meta = Buffer.concat([head, ...kept, kv, infos]);
    const pad = Buffer.alloc(Math.ceil(meta.length / align) * align - meta.length);
    fs.writeFileSync(dst, Buffer.concat([meta, pad, data]));
  });
}
