'use strict';
// What the SDK scripts share: the upstream's request counter, the one JSON
// line of results, and a bound on every wait.
const http = require('http');

const WAIT_LIMIT_MS = 10000;
const SCRIPT_LIMIT_MS = 60000;

// The few response headers a test reads, by lower-case name; headers is a
// fetch Headers object or a plain object (Node's IncomingMessage.headers).
const SEEN = ['content-type', 'x-should-retry', 'stripe-should-retry', 'retry-after',
  'retry-after-ms', 'idempotent-replayed', 'idempotency-key-expires', 'request-id'];

function pick(headers) {
  const out = {};
  if (!headers) return out;
  for (const name of SEEN) {
    let v = typeof headers.get === 'function' ? headers.get(name) : headers[name];
    if (Array.isArray(v)) v = v.join(', ');
    if (v !== undefined && v !== null) out[name] = String(v);
  }
  return out;
}

function getJSON(port, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 5000 }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => {
        try { resolve(JSON.parse(data)); } catch (e) { reject(e); }
      });
    });
    req.on('timeout', () => req.destroy(new Error('upstream control request timed out')));
    req.on('error', reject);
  });
}

// Wait until the upstream has received at least n POSTs with this key.
async function waitForPosts(upstreamPort, key, n = 1, limitMs = WAIT_LIMIT_MS) {
  const end = Date.now() + limitMs;
  for (;;) {
    const { posts } = await getJSON(upstreamPort, '/__count?key=' + encodeURIComponent(key));
    if (posts >= n) return posts;
    if (Date.now() > end) {
      throw new Error(`upstream saw ${posts} POSTs with key ${key}, wanted ${n}`);
    }
    await sleep(20);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Print the one JSON line and exit; a script that runs past SCRIPT_LIMIT_MS
// prints what it has and exits 3.
function run(main) {
  const timer = setTimeout(() => {
    process.stdout.write(JSON.stringify({ error: 'script timed out' }) + '\n');
    process.exit(3);
  }, SCRIPT_LIMIT_MS);
  main().then((result) => {
    clearTimeout(timer);
    result.node = process.version;
    process.stdout.write(JSON.stringify(result) + '\n');
    process.exit(0);
  }, (e) => {
    clearTimeout(timer);
    process.stdout.write(JSON.stringify({ error: String(e && e.stack || e) }) + '\n');
    process.exit(2);
  });
}

module.exports = { pick, getJSON, waitForPosts, sleep, run };
