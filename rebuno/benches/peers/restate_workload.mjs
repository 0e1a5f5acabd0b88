// The peer-comparison workload on Restate (see README.md beside this file): a service whose
// handler runs 10 sequential durable steps (`ctx.run`), each returning a small JSON value,
// served by this process on port $SERVICE_PORT and registered with the Restate server's admin
// API; then 300 sequential calls through the ingress, then 64 clients x 25 calls at once. A
// call through the ingress answers once the invocation completed, so it is create+wait.
// Prints `RESULT {json}`.
import * as restate from "@restatedev/restate-sdk";

const STEPS = 10;
const ingress = process.env.RESTATE_INGRESS ?? "http://127.0.0.1:8080";
const admin = process.env.RESTATE_ADMIN ?? "http://127.0.0.1:9070";
const port = Number(process.env.SERVICE_PORT ?? 9080);
const runs = Number(process.env.REBUNO_BENCH_RUNS ?? 300);
const clients = Number(process.env.REBUNO_BENCH_CLIENTS ?? 64);
const perClient = Number(process.env.REBUNO_BENCH_PER_CLIENT ?? 25);

const wf = restate.service({
  name: "wf",
  handlers: {
    run: async (ctx, input) => {
      let last = null;
      for (let i = 0; i < STEPS; i++) {
        last = await ctx.run(`step-${i}`, async () => ({ step: i, ok: true }));
      }
      return { input, last };
    },
  },
});

restate.serve({ services: [wf], port });

async function register() {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const r = await fetch(`${admin}/deployments`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ uri: `http://127.0.0.1:${port}`, force: true }),
      });
      if (r.ok) return;
      if (Date.now() > deadline) throw new Error(`register: ${r.status} ${await r.text()}`);
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    await new Promise((res) => setTimeout(res, 200));
  }
}

async function call(n) {
  const started = process.hrtime.bigint();
  const r = await fetch(`${ingress}/wf/run`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ n }),
  });
  const body = await r.json();
  if (!r.ok || body.last?.step !== STEPS - 1) throw new Error(`call ${n}: ${r.status} ${JSON.stringify(body)}`);
  return Number(process.hrtime.bigint() - started) / 1e6;
}

function percentile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.round((s.length - 1) * p)];
}

await register();
// The deployment may take a moment to be usable by the ingress.
for (let tries = 0; ; tries++) {
  try {
    await call(-1);
    break;
  } catch (e) {
    if (tries > 100) throw e;
    await new Promise((res) => setTimeout(res, 100));
  }
}
for (let n = 0; n < 10; n++) await call(n);
const lat = [];
for (let n = 0; n < runs; n++) lat.push(await call(n));
const started = Date.now();
await Promise.all(
  Array.from({ length: clients }, async (_, c) => {
    for (let n = 0; n < perClient; n++) await call(c * perClient + n);
  }),
);
const elapsed = (Date.now() - started) / 1000;
const p50 = percentile(lat, 0.5);
const result = {
  system: process.env.SYSTEM_NAME ?? "Restate",
  workflow_p50_ms: p50,
  workflow_p99_ms: percentile(lat, 0.99),
  step_p50_ms: p50 / STEPS,
  steps_per_s_at_64: (clients * perClient * STEPS) / elapsed,
  runs,
  clients,
  per_client: perClient,
};
console.log(`RESULT ${JSON.stringify(result)}`);
process.exit(0);
