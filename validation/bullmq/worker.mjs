// Real BullMQ 6 workers in one process, driven by emqsim/validate_bullmq.py.
//
//   node worker.mjs --socket /tmp/x/redis.sock --queues q0,q1 --delays 731,12 \
//        --lock-duration 2000 --stalled-interval 2000 [--sweep-only]
//
// It loads BullMQ, prints {"ev":"loaded"}, then waits for one stdin line {"go": <epoch ms>} and creates one
// Worker per queue at go + that queue's delay (so the harness gives every Worker's timers an arbitrary
// phase). A Worker has concurrency 1 and a processor that sleeps job.data.ms of wall-clock time. With
// --sweep-only the Workers never fetch jobs (autorun false): they only run BullMQ's stalled checker, as
// `Worker.startStalledCheckTimer()` does for manually fetching workers. The harness may SIGKILL or
// SIGSTOP/SIGCONT this process at any time. A job whose data has busyMs is CPU-bound: busyAfter ms into it the
// processor runs a synchronous busy loop of busyMs ms, which blocks the event loop (the lock manager's timer
// cannot fire meanwhile; events busy_start and busy_end time it), then sleeps the rest of its ms; with busyWait
// it blocks the event loop as long in a synchronous wait (Atomics.wait) instead, without using a core.
// Everything that happens is one JSON line on stdout, with
// `t` = Date.now() (epoch ms: the machine's wall clock, which the harness and Redis share).
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Worker } from 'bullmq';

const { values: args } = parseArgs({
  options: {
    socket: { type: 'string' },
    queues: { type: 'string' },
    delays: { type: 'string', default: '' },
    'lock-duration': { type: 'string', default: '2000' },
    'stalled-interval': { type: 'string', default: '2000' },
    'max-stalled-count': { type: 'string', default: '1' },
    'sweep-only': { type: 'boolean', default: false },
  },
});
const queues = args.queues.split(',');
const delays = args.delays ? args.delays.split(',').map(Number) : queues.map(() => 0);
const sweepOnly = args['sweep-only'];

function emit(ev, fields = {}) {
  process.stdout.write(`${JSON.stringify({ ev, t: Date.now(), pid: process.pid, ...fields })}\n`);
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

const blocker = new Int32Array(new SharedArrayBuffer(4));
function busy(ms, queue, wait) {
  const start = Date.now();
  emit('busy_start', { ms, queue });
  if (wait) {
    // a synchronous wait (as execSync or a synchronous read makes): the event loop is blocked as by a busy
    // loop, but the thread sleeps in the kernel and wakes on time, where a busy loop that lost its core at
    // the deadline ends late
    Atomics.wait(blocker, 0, 0, ms);
  }
  while (Date.now() - start < ms) {
    // a synchronous CPU-bound section: nothing else on this event loop runs until it ends
  }
  emit('busy_end', { ms, queue });
}
const workers = [];

async function start(queue) {
  const lockDuration = Number(args['lock-duration']);
  const worker = new Worker(
    queue,
    async (job, token) => {
      emit('start', { queue, job: job.id, i: job.data.i, processedOn: job.processedOn, token });
      if (job.data.busyMs) {
        await sleep(job.data.busyAfter);
        busy(job.data.busyMs, queue, job.data.busyWait);
        await sleep(Math.max(0, job.data.ms - job.data.busyAfter - job.data.busyMs));
      } else {
        await sleep(job.data.ms);
      }
      emit('work_done', { queue, job: job.id, i: job.data.i });
      return 'ok';
    },
    {
      connection: { path: args.socket, maxRetriesPerRequest: null },
      concurrency: 1,
      lockDuration,
      stalledInterval: Number(args['stalled-interval']),
      maxStalledCount: Number(args['max-stalled-count']),
      autorun: !sweepOnly,
      drainDelay: 1,
    },
  );
  workers.push(worker);
  // Instrumentation only: log each stalled-check attempt (rate-limited or not) when it is sent and when its
  // reply comes back; the call itself is BullMQ's own.
  const moveStalled = worker.moveStalledJobsToWait.bind(worker);
  worker.moveStalledJobsToWait = async () => {
    const sent = Date.now();
    try {
      return await moveStalled();
    } finally {
      emit('sweep_attempt', { queue, sent });
    }
  };
  // Instrumentation only: each lock-renewal batch with the time it was sent. A renewal sent just before the
  // event loop blocks has its reply (and its locksRenewed event) handled only after the block ends: its send
  // time, not its reply, says whether the worker renewed after it resumed.
  const extendLocks = worker.extendJobLocks.bind(worker);
  worker.extendJobLocks = async (jobIds, tokens, duration) => {
    const sent = Date.now();
    const failed = await extendLocks(jobIds, tokens, duration);
    emit('renew_reply', { queue, sent, jobs: jobIds, failed });
    return failed;
  };
  worker.on('locksRenewed', ({ jobIds }) => emit('renewed', { queue, jobs: jobIds }));
  worker.on('lockRenewalFailed', jobIds => emit('renew_failed', { queue, jobs: jobIds }));
  worker.on('completed', job => emit('completed', { queue, job: job.id }));
  worker.on('failed', (job, err) => emit('failed', { queue, job: job?.id, error: err?.message }));
  worker.on('stalled', jobId => emit('stalled', { queue, job: jobId }));
  worker.on('error', err => emit('error', { queue, error: err?.message ?? String(err) }));
  if (sweepOnly) {
    await worker.waitUntilReady();
    await worker.startStalledCheckTimer();
  }
  emit('worker_started', {
    queue,
    lockDuration,
    lockRenewTime: worker.opts.lockRenewTime,
    stalledInterval: worker.opts.stalledInterval,
    sweepOnly,
  });
}

process.on('SIGTERM', async () => {
  try {
    await Promise.all(workers.map(w => w.close(true)));
  } finally {
    process.exit(0);
  }
});

// A victim (one queue) says when its JavaScript runs again after a SIGCONT: how long the machine kept it from a
// core after the harness resumed it (its lock manager's overdue tick fires just before this line is written).
if (queues.length === 1) process.on('SIGCONT', () => emit('resumed', { queue: queues[0] }));
emit('loaded', { node: process.version });
const lines = createInterface({ input: process.stdin });
let started = false;
lines.on('line', line => {
  const msg = JSON.parse(line);
  if (msg.go !== undefined && !started) {
    started = true;
    queues.forEach((queue, k) => {
      const wait = Math.max(0, msg.go + delays[k] - Date.now());
      setTimeout(() => start(queue).catch(err => emit('error', { queue, error: err.message })), wait);
    });
  }
});
lines.on('close', () => process.exit(0));
