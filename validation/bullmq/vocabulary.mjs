// The Redis command names a BullMQ Queue and Worker make Redis run: a Queue adds three jobs; a Worker
// completes the first, fails the second once and retries it (attempts: 2), fails the third for good. The
// caller (tests/test_bullmq_real_vocabulary.py) reads `INFO latencystats` before and after.
// Usage: node vocabulary.mjs --socket PATH
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const path = process.argv[process.argv.indexOf("--socket") + 1];
const connection = () => new IORedis({ path, maxRetriesPerRequest: null });
const queue = new Queue("vocabulary", { connection: connection() });
const worker = new Worker(
  "vocabulary",
  async (job) => {
    if (job.data.fail && job.attemptsMade === 0) throw new Error("fails once");
    await new Promise((resolve) => setTimeout(resolve, 2500)); // the lock manager renews at least once
    return 1;
  },
  { connection: connection(), lockDuration: 2000, stalledInterval: 1000, drainDelay: 1 },
);
const settled = new Promise((resolve) => {
  let n = 0;
  const one = () => { n += 1; if (n === 4) resolve(); }; // completed, failed, completed, failed
  worker.on("completed", one);
  worker.on("failed", one);
});
await queue.add("plain", {});
await queue.add("retried", { fail: true }, { attempts: 2 });
await queue.add("failed", { fail: true }, { attempts: 1 });
await Promise.race([settled, new Promise((resolve) => setTimeout(resolve, 30000))]);
await new Promise((resolve) => setTimeout(resolve, 1500)); // a stalled check and an idle marker wait more
await worker.close();
await queue.close();
console.log(JSON.stringify({ ev: "done" }));
process.exit(0);
