'use strict';
// stripe-node against idemproxy, as an application built on Stripe's SDK
// would use it: customers.create with an idempotencyKey, the SDK's own
// retries (maxNetworkRetries: 2) and error classes.
//
//   node stripe_client.js PORT UPSTREAM_PORT conflict KEY
//       create a customer with KEY, again with the same parameters (a
//       replay), then with other parameters (StripeIdempotencyError)
//   node stripe_client.js PORT UPSTREAM_PORT inprogress KEY DELAY_MS
//       an owner the upstream holds DELAY_MS, and once the upstream has it,
//       a second client with the same key and parameters, which must
//       retry through "in progress" to the owner's replayed response
//   node stripe_client.js PORT UPSTREAM_PORT failed KEY RETRIES
//       one call with KEY that the upstream answers 500, with
//       maxNetworkRetries RETRIES: its attempts show where the SDK stopped
//
// Prints one JSON line: each call's outcome (returned: id, status, headers;
// or raised: class, type, code, statusCode, headers) and its attempts as
// the SDK's HTTP client saw them (status and headers of every response).
const Stripe = require('stripe');
const { pick, waitForPosts, run } = require('./lib');

const [port, upstreamPort, scenario, key, delayMs] = process.argv.slice(2);

// A client of its own per call, so that its attempts are its own.
function client(retries = 2) {
  const attempts = [];
  const http = Stripe.createNodeHttpClient();
  const send = http.makeRequest.bind(http);
  http.makeRequest = (host, p, path, method, headers, body, protocol, timeout) => {
    const a = { method, path, idempotency_key: headers['Idempotency-Key'] || null,
      content_type: headers['Content-Type'] || null, t: Date.now() };
    attempts.push(a);
    return send(host, p, path, method, headers, body, protocol, timeout).then((res) => {
      a.status = res.getStatusCode();
      a.headers = pick(res.getHeaders());
      return res;
    }, (e) => {
      a.error = e.code || String(e);
      throw e;
    });
  };
  const stripe = new Stripe('sk_test_x', {
    host: '127.0.0.1', port: Number(port), protocol: 'http', maxNetworkRetries: retries,
    httpClient: http,
  });
  return { stripe, attempts };
}

async function outcome(call, retries) {
  const { stripe, attempts } = client(retries);
  const t0 = Date.now();
  try {
    const r = await call(stripe);
    const res = r.lastResponse;
    return { returned: true, id: r.id, object: r.object, n: r.n, status: res.statusCode,
      headers: pick(res.headers), attempts, ms: Date.now() - t0 };
  } catch (e) {
    return { raised: e.constructor.name, type: e.type, rawType: e.rawType || null,
      code: e.code || null, statusCode: e.statusCode || null, message: e.message,
      headers: pick(e.headers), attempts, ms: Date.now() - t0 };
  }
}

const scenarios = {
  async conflict() {
    const ada = { name: 'Ada', email: 'ada@example.com' };
    const first = await outcome((s) => s.customers.create(ada, { idempotencyKey: key }));
    const replay = await outcome((s) => s.customers.create(ada, { idempotencyKey: key }));
    const other = await outcome((s) => s.customers.create(
      { name: 'Grace', email: 'grace@example.com' }, { idempotencyKey: key }));
    return { first, replay, other };
  },

  async inprogress() {
    const params = { name: 'Slow', email: 'slow@example.com', metadata: { delay_ms: delayMs } };
    const owner = outcome((s) => s.customers.create(params, { idempotencyKey: key }));
    await waitForPosts(upstreamPort, key, 1);
    const duplicate = outcome((s) => s.customers.create(params, { idempotencyKey: key }));
    return { owner: await owner, duplicate: await duplicate };
  },

  async failed() {
    const params = { name: 'Fail', email: 'fail@example.com', metadata: { action: 'fail500' } };
    const call = await outcome((s) => s.customers.create(params, { idempotencyKey: key }),
      Number(delayMs));
    return { call };
  },
};

run(async () => {
  if (!scenarios[scenario]) throw new Error('unknown scenario ' + scenario);
  const result = await scenarios[scenario]();
  result.sdk = { name: 'stripe', version: Stripe.PACKAGE_VERSION };
  return result;
});
