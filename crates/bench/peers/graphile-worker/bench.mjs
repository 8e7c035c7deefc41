// graphile-worker as a throughput peer for `racklift bench queue`, driven by the Rust benchmark.
//
// One run is a burn-down, like racklift's own: the jobs are enqueued first (not timed), then `processes` worker
// processes of `concurrency` each start, and the clock runs from the moment the first of them is running until
// every handler has run and graphile-worker's job table is empty, i.e. until the last completion is durable.
//
// Settings are graphile-worker's documented batching ones (local queue, completion batch delay 0), the settings
// under which the reference figure (31.6k jobs/s, 2 processes x 24) was measured.
//
// Protocol with the benchmark, one line each on stdout: `ready`, then `running` when the clock starts, then
// `{"jobs":..,"elapsed_ms":..,"worker_cpu_us":..}` when the table is empty. The benchmark reads PostgreSQL's
// CPU between `running` and the result line.
import { fork } from "node:child_process";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import pg from "pg";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";

const ENQUEUE_CHUNK = 10000;
// How often a worker process reports how many handlers it ran; the last report of a run is at most this late.
const REPORT_MS = 5;

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const connectionString = process.env.DATABASE_URL;
if (!connectionString) {
  console.error("DATABASE_URL is not set");
  process.exit(2);
}

if (process.argv[2] === "worker") {
  await worker();
} else {
  await drive();
}

// One worker process: waits for `go`, runs graphile-worker until told to `stop`, reports its handler count and CPU.
async function worker() {
  const concurrency = Number(arg("concurrency", 24));
  const localQueue = Number(arg("local-queue", 500));
  let handled = 0;
  let reported = 0;
  let cpuAtGo;
  let runner;
  const report = () => {
    if (handled > reported) {
      process.send({ handled: handled - reported });
      reported = handled;
    }
  };
  process.on("message", async (msg) => {
    if (msg === "go") {
      cpuAtGo = process.cpuUsage();
      setInterval(report, REPORT_MS).unref();
      runner = await run({
        connectionString,
        concurrency,
        // graphile-worker warns below this (one connection per concurrent job, plus two).
        maxPoolSize: concurrency + 2,
        noHandleSignals: true,
        pollInterval: 1000,
        logger: quietLogger(),
        taskList: {
          noop: async () => {
            handled += 1;
          },
        },
        preset: {
          worker: {
            localQueue: { size: localQueue },
            completeJobBatchDelay: 0,
            failJobBatchDelay: 0,
          },
        },
      });
      process.send({ started_at: now() });
    } else if (msg === "stop") {
      report();
      const cpu = process.cpuUsage(cpuAtGo);
      await runner.stop();
      process.send({ cpu_us: cpu.user + cpu.system });
      process.disconnect();
    }
  });
  process.send("ready");
}

async function drive() {
  const jobs = Number(arg("jobs", 50000));
  const processes = Number(arg("processes", 2));
  const concurrency = Number(arg("concurrency", 24));
  const localQueue = Number(arg("local-queue", 500));

  await runMigrations({ connectionString, logger: quietLogger() });
  const client = new pg.Client({ connectionString });
  await client.connect();
  await client.query("DELETE FROM graphile_worker._private_jobs");
  const utils = await makeWorkerUtils({ connectionString, logger: quietLogger() });
  for (let left = jobs; left > 0; left -= ENQUEUE_CHUNK) {
    const n = Math.min(left, ENQUEUE_CHUNK);
    await utils.addJobs(Array.from({ length: n }, () => ({ identifier: "noop", payload: {} })));
  }
  await utils.release();
  await client.query("VACUUM ANALYZE graphile_worker._private_jobs");

  const self = new URL(import.meta.url).pathname;
  const children = [];
  for (let i = 0; i < processes; i++) {
    children.push(
      fork(self, ["worker", "--concurrency", String(concurrency), "--local-queue", String(localQueue)], {
        stdio: ["ignore", "ignore", "inherit", "ipc"],
      }),
    );
  }
  await Promise.all(children.map((c) => once(c, (m) => m === "ready")));

  // Told by the benchmark when its CPU reading is taken, so that reading brackets only the timed part.
  console.log("ready");
  const stdin = createInterface({ input: process.stdin });
  await new Promise((resolve) => stdin.once("line", resolve));
  stdin.close();
  process.stdin.destroy();

  let handled = 0;
  let allRan;
  const ran = new Promise((resolve) => (allRan = resolve));
  for (const c of children) {
    c.on("message", (m) => {
      if (m && typeof m.handled === "number") {
        handled += m.handled;
        if (handled >= jobs) allRan();
      }
    });
  }
  // The clock starts when the first worker process has started (its pool connected, its queue listening), not at
  // `go`: graphile-worker's start-up is not part of its throughput, and racklift's pools start with their
  // connections already open.
  const started = children.map((c) => once(c, (m) => m && typeof m.started_at === "number"));
  console.log("running");
  for (const c of children) c.send("go");
  const stall = setTimeout(() => {
    console.error(`graphile-worker stalled: ${handled} of ${jobs} handled after 600 s`);
    process.exit(1);
  }, 600000);
  // Once every handler has run, the run ends when the last completion is written: the table is empty.
  await ran;
  while ((await client.query("SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS left")).rows[0].left) {
    await sleep(1);
  }
  const end = now();
  const start = Math.min(...(await Promise.all(started)).map((m) => m.started_at));
  const elapsedMs = end - start;
  clearTimeout(stall);

  let workerCpuUs = 0;
  const cpuReports = children.map((c) =>
    once(c, (m) => m && typeof m.cpu_us === "number").then((m) => (workerCpuUs += m.cpu_us)),
  );
  for (const c of children) c.send("stop");
  await Promise.all(cpuReports);
  await client.end();
  if (handled !== jobs) {
    console.error(`graphile-worker ran ${handled} handlers for ${jobs} jobs`);
    process.exit(1);
  }
  console.log(JSON.stringify({ jobs, elapsed_ms: elapsedMs, worker_cpu_us: workerCpuUs }));
}

function once(child, pred) {
  return new Promise((resolve, reject) => {
    const onMessage = (m) => {
      if (pred(m)) {
        child.off("message", onMessage);
        resolve(m);
      }
    };
    child.on("message", onMessage);
    child.once("exit", (code) => reject(new Error(`worker process exited with ${code}`)));
  });
}

// Milliseconds since the epoch, sub-millisecond and comparable between the driver and its worker processes.
function now() {
  return performance.timeOrigin + performance.now();
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function quietLogger() {
  return new Logger(() => (level, message) => {
    if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
  });
}
