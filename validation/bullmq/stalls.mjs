// One real BullMQ 6 Worker (concurrency 1) on one queue, for the client-side stalls of issue 25, driven by
// tests/test_bullmq_real_client.py:
//
//   node stalls.mjs --queue q --jobs '[{"ms":300,"freezeAfterFinish":true},{"ms":3000}]' \
//        --socket /tmp/x/redis.sock [--port 6390] [--sandbox] [--attempts 2] [--retry-limit 0] \
//        --lock-duration 2000 --stalled-interval 2000
//
// It adds the jobs (in order, so job i has id i + 1), prints {"ev":"ready"}, and runs the Worker. With
// --sandbox the processor is child.mjs in a child process (a job with crashAfter exits its child on its
// first attempt). A job with freezeAfterFinish makes the process stop itself (SIGSTOP) right after its
// moveToFinished has been written to the socket, before the reply can be read: the harness sends SIGCONT.
// A job with waitFor (a file path) ends only once that file exists (after its ms), and every finish command
// sent for it from then on, the first and any ioredis resends after a reconnect, is announced with
// {"ev":"finish_sent"} (a moveToFailed as {"ev":"fail_sent"}), until the next job starts: the harness holds the proxy's replies, creates the file, and cuts the connection
// once the finish ran at Redis (tests/test_bullmq_real_resend.py).
// With --retry-limit N the Worker's connection is a user-supplied one whose ioredis `retryStrategy` gives up
// (returns null) after N reconnect attempts, BullMQ's backoff before that: 0 never reconnects after a close
// (tests/test_bullmq_real_stuck.py). Without it BullMQ's default retry strategy reconnects for ever.
// With --max-retries-per-request N (or null) the Worker gets a user-supplied IORedis instance with that
// maxRetriesPerRequest and BullMQ's own retry strategy (a BullMQ 6.7 Worker accepts 0 or null only: its
// blocking connection duplicates the instance and refuses any other value); each reconnect attempt is
// announced with {"ev":"retry"} (tests/test_bullmq_real_maxretries.py).
// Every event is one JSON line on stdout with t = Date.now().
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';

const { values: args } = parseArgs({
  options: {
    queue: { type: 'string' },
    jobs: { type: 'string' },
    socket: { type: 'string' },
    port: { type: 'string' },
    sandbox: { type: 'boolean', default: false },
    attempts: { type: 'string', default: '1' },
    'retry-limit': { type: 'string' },
    'max-retries-per-request': { type: 'string' },
    'lock-duration': { type: 'string', default: '2000' },
    'stalled-interval': { type: 'string', default: '2000' },
  },
});
const emit = (ev, fields = {}) =>
  process.stdout.write(`${JSON.stringify({ ev, t: Date.now(), pid: process.pid, ...fields })}\n`);
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
// The jobs are added over --socket; the Worker connects there too, or with --port over TCP on loopback (a proxy).
const direct = { path: args.socket, maxRetriesPerRequest: null };
const connection = args.port ? { host: '127.0.0.1', port: Number(args.port), maxRetriesPerRequest: null } : { ...direct };
if (args['retry-limit'] !== undefined) {
  const limit = Number(args['retry-limit']);
  connection.retryStrategy = times => {
    const delay = times > limit ? null : Math.max(Math.min(Math.exp(times), 20000), 1000);
    emit('retry', { times, delay });
    return delay;
  };
}
const instanceRetries = args['max-retries-per-request'];
const workerConnection =
  instanceRetries === undefined
    ? connection
    : new Redis({
        ...connection,
        maxRetriesPerRequest: instanceRetries === 'null' ? null : Number(instanceRetries),
        retryStrategy: times => {
          const delay = Math.max(Math.min(Math.exp(times), 20000), 1000);
          emit('retry', { times, delay });
          return delay;
        },
      });
const queueName = args.queue;
const jobs = JSON.parse(args.jobs);

const queue = new Queue(queueName, { connection: direct });
for (const [i, data] of jobs.entries()) {
  await queue.add('job', { i, ...data }, { attempts: Number(args.attempts), removeOnFail: false });
}
await queue.close();

let freezeOnFinish = null; // the id of the job whose moveToFinished stops this process once written
let announceFinish = null; // the id of the (waitFor) job whose finish commands are announced
const here = path.dirname(fileURLToPath(import.meta.url));
const processor = args.sandbox
  ? path.join(here, 'child.mjs')
  : async job => {
      emit('start', { job: job.id, processedOn: job.processedOn, attemptsMade: job.attemptsMade });
      announceFinish = null;
      await sleep(job.data.ms);
      if (job.data.waitFor) {
        emit('waiting', { job: job.id });
        while (!existsSync(job.data.waitFor)) await sleep(5);
        announceFinish = job.id;
      }
      if (job.data.freezeAfterFinish) freezeOnFinish = job.id;
      return 'ok';
    };
const worker = new Worker(queueName, processor, {
  connection: workerConnection,
  concurrency: 1,
  lockDuration: Number(args['lock-duration']),
  stalledInterval: Number(args['stalled-interval']),
  maxStalledCount: 1,
  drainDelay: 1,
  autorun: false,
  useWorkerThreads: false,
});
worker.on('active', job => emit('active', { job: job.id, processedOn: job.processedOn, attemptsMade: job.attemptsMade }));
worker.on('completed', job => emit('completed', { job: job.id, attemptsMade: job.attemptsMade }));
worker.on('failed', (job, err) => emit('failed', { job: job?.id, error: err?.message, attemptsMade: job?.attemptsMade }));
worker.on('stalled', jobId => emit('stalled', { job: jobId }));
worker.on('locksRenewed', ({ jobIds }) => emit('renewed', { jobs: jobIds }));
worker.on('lockRenewalFailed', jobIds => emit('renew_failed', { jobs: jobIds }));
worker.on('error', err => emit('error', { error: err?.message ?? String(err) }));
await worker.waitUntilReady();
const client = await worker.backend.client;
const sendCommand = client.sendCommand.bind(client);
client.sendCommand = (command, stream) => {
  const result = sendCommand(command, stream);
  const finish = command.args.some(a => typeof a === 'string' && a.endsWith(':completed'));
  const fail = command.args.some(a => typeof a === 'string' && a.endsWith(':failed'));
  if ((finish || fail) && announceFinish !== null) emit(finish ? 'finish_sent' : 'fail_sent', { job: announceFinish });
  if (finish && freezeOnFinish !== null) {
    const job = freezeOnFinish;
    freezeOnFinish = null;
    emit('finish_sent', { job });
    process.kill(process.pid, 'SIGSTOP'); // the command is on the wire; its reply is not read yet
  }
  return result;
};
emit('ready', { lockRenewTime: worker.opts.lockRenewTime });
worker.run().catch(err => emit('error', { error: err.message }));
process.on('SIGTERM', async () => {
  try {
    await worker.close(true);
  } finally {
    process.exit(0);
  }
});
