'use strict';
// orb-billing (a Stainless-generated SDK) against idemproxy: customers.create
// with an idempotencyKey, the SDK's default retries (maxRetries 2, obeying
// x-should-retry, retry-after-ms and retry-after) and its error classes.
//
//   node orb_client.js PORT UPSTREAM_PORT slow WARM_KEY KEY DELAY_MS CALLS
//       one call with WARM_KEY the upstream holds DELAY_MS (so the route
//       has an owner duration to go by), then an owner with KEY held as
//       long and, once the upstream has it, CALLS-1 concurrent duplicates
//       with KEY: each must end with the owner's response
//   node orb_client.js PORT UPSTREAM_PORT unknown KEY
//       a call whose upstream resets the connection after reading it (its
//       outcome is unknown), then the same call again: 409 outcome-unknown,
//       which the SDK must not retry
//   node orb_client.js PORT UPSTREAM_PORT failed KEY RETRIES
//       one call with KEY that the upstream answers 500, with maxRetries
//       RETRIES: its attempts show where the SDK stopped
//
// Prints one JSON line: each call's outcome (returned: id, status, headers;
// or raised: class, status, headers, body) and its attempts as the SDK's
// fetch saw them (status and headers of every response).
const { Orb } = require('orb-billing');
const { VERSION } = require('orb-billing/version');
const { pick, waitForPosts, run } = require('./lib');

const [port, upstreamPort, scenario, ...args] = process.argv.slice(2);

// A client of its own per call, so that its attempts are its own. Retries
// and back-off are the SDK's defaults.
function client(maxRetries) {
  const attempts = [];
  const counted = async (url, init) => {
    const h = new Headers(init.headers);
    const a = { method: init.method, url: String(url), idempotency_key: h.get('idempotency-key'),
      retry_count: h.get('x-stainless-retry-count'), t: Date.now() };
    attempts.push(a);
    try {
      const res = await fetch(url, init);
      a.status = res.status;
      a.headers = pick(res.headers);
      return res;
    } catch (e) {
      a.error = String(e && e.cause || e);
      throw e;
    }
  };
  const orb = new Orb({ apiKey: 'orb_test_x', baseURL: `http://127.0.0.1:${port}/v1`,
    fetch: counted, logLevel: 'off', ...(maxRetries === undefined ? {} : { maxRetries }) });
  return { orb, attempts };
}

async function outcome(call, maxRetries) {
  const { orb, attempts } = client(maxRetries);
  const t0 = Date.now();
  try {
    const { data, response } = await call(orb).withResponse();
    return { returned: true, id: data.id, n: data.n, status: response.status,
      headers: pick(response.headers), attempts, max_retries: orb.maxRetries,
      ms: Date.now() - t0 };
  } catch (e) {
    return { raised: e.constructor.name, status: e.status === undefined ? null : e.status,
      headers: pick(e.headers), body: e.error === undefined ? null : e.error,
      message: e.message, attempts, max_retries: orb.maxRetries, ms: Date.now() - t0 };
  }
}

const scenarios = {
  async slow() {
    const [warmKey, key, delayMs, calls] = args;
    const params = (name) => ({ name, email: name.toLowerCase() + '@example.com',
      metadata: { delay_ms: delayMs } });
    const warm = await outcome((o) => o.customers.create(params('Warm'),
      { idempotencyKey: warmKey }));
    const owner = outcome((o) => o.customers.create(params('Slow'), { idempotencyKey: key }));
    await waitForPosts(upstreamPort, key, 1);
    const duplicates = [];
    for (let i = 1; i < Number(calls); i++) {
      duplicates.push(outcome((o) => o.customers.create(params('Slow'),
        { idempotencyKey: key })));
    }
    return { warm, owner: await owner, duplicates: await Promise.all(duplicates) };
  },

  async unknown() {
    const [key] = args;
    const params = { name: 'Lost', email: 'lost@example.com', metadata: { action: 'reset' } };
    const first = await outcome((o) => o.customers.create(params, { idempotencyKey: key }));
    const again = await outcome((o) => o.customers.create(params, { idempotencyKey: key }));
    return { first, again };
  },

  async failed() {
    const [key, retries] = args;
    const params = { name: 'Fail', email: 'fail@example.com', metadata: { action: 'fail500' } };
    const call = await outcome((o) => o.customers.create(params, { idempotencyKey: key }),
      Number(retries));
    return { call };
  },
};

run(async () => {
  if (!scenarios[scenario]) throw new Error('unknown scenario ' + scenario);
  const result = await scenarios[scenario]();
  result.sdk = { name: 'orb-billing', version: VERSION };
  return result;
});
