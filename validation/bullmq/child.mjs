// A sandboxed BullMQ processor (run in a child process by the Worker, useWorkerThreads false), driven by
// tests/test_bullmq_real_client.py. On a job's first attempt with data.crashAfter, the child exits with code 3
// that many ms in (the parent rejects the job with "Unexpected exit code"); otherwise it sleeps data.ms.
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

export default async function (job) {
  if (job.data.crashAfter !== undefined && job.attemptsMade === 0) {
    await sleep(job.data.crashAfter);
    process.exit(3);
  }
  await sleep(job.data.ms);
  return 'ok';
}
