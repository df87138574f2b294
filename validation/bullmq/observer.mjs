// Producer and observer for a set of queues, driven by emqsim/validate_bullmq.py.
//
//   node observer.mjs --socket /tmp/x/redis.sock --queues q0,q1,q2 [--poll-ms 20]
//
// Prints {"ev":"loaded"} once its QueueEvents readers run, then reads JSON commands, one per stdin line:
//   {"add": [{"queue": "q0", "i": 0, "ms": 60000}, ...]}   add one job per item (id "j<i>", data {i, ms});
//   an item may add busyAfter and busyMs (ms): a CPU-bound job that blocks its worker's event loop
//   {"quit": true}                                         close and exit
// Every queue event (added, active, stalled, completed, failed) is printed as a JSON line whose `t` is the
// Redis server's clock when the event was written (the ms part of its stream id): for `stalled`, the moment
// moveStalledJobsToWait moved the job back to wait. Every --poll-ms it also reads each queue's
// `stalled-check` key, which every sweep that ran (was not rate-limited) sets to its sender's Date.now():
// a new value is printed as {"ev":"sweep","queue":...,"at":<that value>}, so the harness sees every sweep.
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';

const { values: args } = parseArgs({
  options: {
    socket: { type: 'string' },
    queues: { type: 'string' },
    'poll-ms': { type: 'string', default: '20' },
  },
});

function emit(ev, fields = {}) {
  process.stdout.write(`${JSON.stringify({ ev, t: Date.now(), pid: process.pid, ...fields })}\n`);
}

const connection = { path: args.socket, maxRetriesPerRequest: null };
const names = args.queues.split(',');
const queues = new Map(names.map(name => [name, new Queue(name, { connection })]));
const readers = names.map(name => {
  const events = new QueueEvents(name, { connection, lastEventId: '0-0', blockingTimeout: 200 });
  for (const ev of ['added', 'active', 'stalled', 'completed', 'failed']) {
    events.on(ev, (payload, id) =>
      emit(`queue_${ev}`, { queue: name, job: payload?.jobId, t: Number(String(id).split('-')[0]), id }),
    );
  }
  events.on('error', err => emit('error', { queue: name, error: err?.message ?? String(err) }));
  return events;
});

const poller = new Redis({ path: args.socket, maxRetriesPerRequest: null });
const checkKeys = names.map(name => queues.get(name).toKey('stalled-check'));
const lastSweep = names.map(() => null);
let polling = true;
async function pollSweeps() {
  while (polling) {
    const values = await poller.mget(...checkKeys);
    values.forEach((value, k) => {
      if (value !== null && value !== lastSweep[k]) {
        lastSweep[k] = value;
        emit('sweep', { queue: names[k], at: Number(value) });
      }
    });
    await new Promise(resolve => setTimeout(resolve, Number(args['poll-ms'])));
  }
}

async function handle(msg) {
  if (msg.add) {
    await Promise.all(
      msg.add.map(item =>
        queues.get(item.queue).add(
          'sleep',
          item.busyMs ? { i: item.i, ms: item.ms, busyAfter: item.busyAfter, busyMs: item.busyMs } : { i: item.i, ms: item.ms },
          { jobId: `j${item.i}`, removeOnComplete: false, removeOnFail: false },
        ),
      ),
    );
    emit('added', { jobs: msg.add.length });
  }
  if (msg.quit) {
    polling = false;
    poller.disconnect();
    await Promise.all(readers.map(r => r.close()));
    await Promise.all([...queues.values()].map(q => q.close()));
    process.exit(0);
  }
}

await Promise.all([...queues.values()].map(q => q.waitUntilReady()));
await Promise.all(readers.map(r => r.waitUntilReady()));
pollSweeps().catch(err => emit('error', { error: err.message }));
emit('loaded', { node: process.version });
const lines = createInterface({ input: process.stdin });
let chain = Promise.resolve();
lines.on('line', line => {
  chain = chain.then(() => handle(JSON.parse(line))).catch(err => emit('error', { error: err.message }));
});
lines.on('close', () => process.exit(0));
