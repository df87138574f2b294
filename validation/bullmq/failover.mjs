// Real BullMQ 6 Workers through a Redis failover or memory pressure, driven by
// tests/test_bullmq_real_failover.py and tests/test_bullmq_real_eviction.py:
//
//   node failover.mjs --port 6390 --plan '[{"queue":"q","ms":1500,"jobs":2,"at":-2000}]' \
//        --lock-duration 2000 --stalled-interval 2000
//
// One Worker (concurrency 1) per queue of the plan, each talking to Redis over TCP on loopback at --port (the
// harness's proxy, which the harness points at the primary, cuts, points at the demoted primary, then at the
// promoted replica), or over the queue's own unix `socket`, with the queue's own `lockDuration` if given. It
// prints {"ev":"ready"} once every Worker is connected, then reads one stdin line {"go": <epoch ms>} and at
// go + at adds the queue's jobs (ids 1..jobs), each a processor that sleeps `ms` of wall-clock time. Every
// event is one JSON line on stdout with t = Date.now(); a Worker's errors (READONLY while it talks to the
// demoted primary, connection errors while the proxy is cut) come at most one line per 50 ms per Worker,
// with the count since.
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Queue, Worker } from 'bullmq';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    plan: { type: 'string' },
    'lock-duration': { type: 'string', default: '2000' },
    'stalled-interval': { type: 'string', default: '2000' },
  },
});
const emit = (ev, fields = {}) =>
  process.stdout.write(`${JSON.stringify({ ev, t: Date.now(), pid: process.pid, ...fields })}\n`);
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const connection = { host: '127.0.0.1', port: Number(args.port), maxRetriesPerRequest: null };
const plan = JSON.parse(args.plan);

const workers = [];
// a queue's `socket` (a unix socket path) overrides --port for its Worker and its jobs' adds
const connectionOf = q => (q.socket ? { path: q.socket, maxRetriesPerRequest: null } : connection);
for (const q of plan) {
  const { queue } = q;
  const worker = new Worker(
    queue,
    async job => {
      await sleep(job.data.ms);
      return 'ok';
    },
    {
      connection: connectionOf(q),
      concurrency: 1,
      lockDuration: Number(q.lockDuration ?? args['lock-duration']),
      stalledInterval: Number(args['stalled-interval']),
      maxStalledCount: 1,
      drainDelay: 1,
      autorun: false,
    },
  );
  let lastError = { at: 0, count: 0 };
  worker.on('active', job => emit('active', { queue, job: job.id, attemptsMade: job.attemptsMade }));
  worker.on('completed', job => emit('completed', { queue, job: job.id }));
  worker.on('failed', (job, err) => emit('failed', { queue, job: job?.id, error: err?.message }));
  worker.on('stalled', jobId => emit('stalled', { queue, job: jobId }));
  worker.on('lockRenewalFailed', jobIds => emit('renew_failed', { queue, jobs: jobIds }));
  worker.on('error', err => {
    lastError.count += 1;
    const now = Date.now();
    if (now - lastError.at >= 50) {
      emit('error', { queue, error: err?.message ?? String(err), count: lastError.count });
      lastError = { at: now, count: 0 };
    }
  });
  workers.push(worker);
}
await Promise.all(workers.map(w => w.waitUntilReady()));
for (const w of workers) w.run().catch(err => emit('error', { queue: w.name, error: err.message, count: 1 }));
emit('ready');
const [line] = await once(createInterface({ input: process.stdin }), 'line');
const { go } = JSON.parse(line);

await Promise.all(
  plan.map(async p => {
    const { queue, ms, jobs, at } = p;
    await sleep(Math.max(0, go + at - Date.now()));
    const q = new Queue(queue, { connection: connectionOf(p) });
    for (let i = 0; i < jobs; i++) await q.add('job', { i, ms }, { removeOnFail: false });
    emit('added', { queue, jobs });
    await q.close();
  }),
);
process.on('SIGTERM', () => process.exit(0));
