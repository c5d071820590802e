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
