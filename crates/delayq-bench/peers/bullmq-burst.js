#!/usr/bin/env node
'use strict';
// W4 (docs/benchmarks.md) against BullMQ: N jobs due at one instant, added with addBulk in
// batches of 1,000 before it, then drained by one Worker of 50 slots; each slot records the
// receipt and acks by returning, as in W2. Prints one JSON line:
//   {"drain_ms":…,"first_pop_ms":…,"finish_drain_ms":…,"received":…,"duplicates":…,"early":…,…}
// drain_ms is the last receipt after the due instant, as delayq-bench's burst reports it.
// Needs bullmq and ioredis on NODE_PATH (peer-extra.sh sets it). The Redis it runs on is
// FLUSHALLed.
//   node bullmq-burst.js [--host H] [--port P] [--n N] [--lead-ms MS] [--grace-ms MS]
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

function flag(name, fallback) {
  const k = process.argv.indexOf(`--${name}`);
  return k >= 0 && k + 1 < process.argv.length ? process.argv[k + 1] : fallback;
}
const host = flag('host', '127.0.0.1');
const port = Number(flag('port', '6379'));
const n = Number(flag('n', '200000'));
const leadMs = Number(flag('lead-ms', '15000'));
const graceMs = Number(flag('grace-ms', '60000'));
const concurrency = Number(flag('concurrency', '50'));
const bodyBytes = Number(flag('body-bytes', '100'));
const queueName = 'bench-burst';

// The body of WORKLOADS.md: {"i":…,"due":…,"pad":"xx…"}, `bodyBytes` long in JSON.
function body(i, due) {
  const o = { i, due, pad: '' };
  o.pad = 'x'.repeat(Math.max(0, bodyBytes - JSON.stringify(o).length));
  return o;
}

async function main() {
  const t0 = Date.now();
  const dueAt = t0 + leadMs;
  const connection = { host, port };
  const redis = new IORedis(connection);
  await redis.flushall();
  const queue = new Queue(queueName, { connection });
  await queue.waitUntilReady();

  const firstRecv = new Float64Array(n).fill(-1);
  let receipts = 0;
  let unique = 0;
  let lastAck = 0;
  const worker = new Worker(queueName, async (job) => {
    const now = Date.now();
    const i = job.data.i;
    receipts++;
    if (firstRecv[i] < 0) { firstRecv[i] = now; unique++; }
  }, { connection, concurrency });
  worker.on('completed', () => { lastAck = Date.now(); });
  await worker.waitUntilReady();

  const pushStart = Date.now();
  for (let s = 0; s < n; s += 1000) {
    const now = Date.now();
    const batch = [];
    for (let i = s; i < Math.min(n, s + 1000); i++) {
      batch.push({ name: 'j', data: body(i, dueAt), opts: { delay: Math.max(0, dueAt - now), timestamp: now } });
    }
    await queue.addBulk(batch);
  }
  const pushEnd = Date.now();

  while (unique < n && Date.now() < dueAt + graceMs) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 1000));
  await worker.close();

  let early = 0;
  let first = Infinity;
  let last = -Infinity;
  for (let i = 0; i < n; i++) {
    if (firstRecv[i] < 0) continue;
    const late = firstRecv[i] - dueAt;
    if (late < 0) early++;
    first = Math.min(first, late);
    last = Math.max(last, late);
  }
  console.log(JSON.stringify({
    peer: 'bullmq', workload: 'burst', n, concurrency,
    push_jobs_per_s: Math.round((n * 1000) / Math.max(1, pushEnd - pushStart)),
    push_end_ms: pushEnd - t0, pushed_late: pushEnd >= dueAt ? 1 : 0,
    first_pop_ms: unique ? first : null, drain_ms: unique ? last : null,
    finish_drain_ms: lastAck ? lastAck - dueAt : null,
    received: unique, receipts, duplicates: receipts - unique, missing: n - unique, early,
    valid: pushEnd < dueAt && unique === n && early === 0,
  }));
  await queue.close();
  await redis.flushall();
  await redis.quit();
}
main().catch((e) => { console.error(e); process.exit(1); });
