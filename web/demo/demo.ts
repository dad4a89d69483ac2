// The demo page of `idemguard serve` in development mode: a prompt, a
// Generate button wired to @idemguard/client, and the answers with whether
// each was a replay and its key.

import { IdemguardError, cancelJob, contentOf, forgetJob, isFinal, pendingKey, run, runStream, submitJob, watchJob, type JobProgress, type RunResult } from "../src/index.js";

const SCOPE = "demo";
// The public development key: accepted only in development mode. Production
// pages send a JWT from the product's identity provider instead.
const TOKEN = "dev-demo-key";
// The prompt of the action that has not had its answer yet, to resume it
// after a reload.
const PENDING = "idemguard-demo:pending";
// The same for a streamed answer.
const PENDING_STREAM = "idemguard-demo:pending-stream";

const form = document.querySelector<HTMLFormElement>("#form")!;
const prompt = document.querySelector<HTMLTextAreaElement>("#prompt")!;
const status = document.querySelector<HTMLElement>("#status")!;
const results = document.querySelector<HTMLOListElement>("#results")!;

let running = 0;

const inputOf = (text: string) => ({ messages: [{ role: "user", content: text }] });

function setStatus(state: "idle" | "running", text: string, key?: string): void {
  status.dataset["state"] = state;
  status.textContent = text;
  if (key !== undefined) status.dataset["key"] = key;
  else delete status.dataset["key"];
}

// resultItem adds a result to the top of the list: its answer, and a line
// with its badge and its key.
function resultItem(resumed: boolean, badgeText = "") {
  const li = document.createElement("li");
  li.className = "result";
  const answer = document.createElement("p");
  answer.className = "answer";
  const meta = document.createElement("div");
  meta.className = "meta";
  const badge = document.createElement("span");
  badge.className = "badge";
  badge.textContent = badgeText;
  const key = document.createElement("code");
  key.className = "key";
  meta.append(badge, document.createTextNode("key"), key);
  if (resumed) meta.append(document.createTextNode("· resumed after reload"));
  li.append(answer, meta);
  results.prepend(li);
  return { li, answer, meta, badge, key };
}

// settled ends a call of the prompt text: its pending entry goes once the
// action has its outcome, and the status is idle when no call runs.
function settled(text: string, pendingEntry: string): void {
  running--;
  if (pendingKey(SCOPE, inputOf(text)) === null && sessionStorage.getItem(pendingEntry) === text) {
    sessionStorage.removeItem(pendingEntry);
  }
  if (running === 0) setStatus("idle", "");
}

function show(res: RunResult | IdemguardError, resumed: boolean): void {
  const { li, answer, badge, key } = resultItem(resumed);
  if (res instanceof IdemguardError) {
    li.classList.add("error");
    answer.textContent = res.message;
    badge.textContent = res.status !== undefined ? `error ${res.status}` : "network error";
    key.textContent = res.key;
  } else {
    const text = res.envelope.data?.["text"];
    answer.textContent = typeof text === "string" ? text : JSON.stringify(res.envelope);
    li.dataset["replay"] = String(res.cached);
    badge.textContent = res.cached ? "replay" : "first execution";
    key.textContent = res.key;
    li.dataset["key"] = res.key;
  }
}

async function generate(text: string, resumed = false): Promise<void> {
  sessionStorage.setItem(PENDING, text);
  running++;
  const call = run(SCOPE, inputOf(text), { token: TOKEN, waitSeconds: 25 });
  // run() has chosen (or found) the action's key before its first request.
  const key = pendingKey(SCOPE, inputOf(text)) ?? undefined;
  setStatus("running", resumed ? "Resuming after reload…" : "Generating…", key);
  try {
    show(await call, resumed);
  } catch (err) {
    if (!(err instanceof IdemguardError)) throw err;
    show(err, resumed);
  } finally {
    settled(text, PENDING);
  }
}

// A streamed answer: shown word by word as the events arrive. A reload in
// the middle resumes the action with its key and shows the stream again from
// its first word (the running execution, or its stored events).
async function streamAnswer(text: string, resumed = false): Promise<void> {
  sessionStorage.setItem(PENDING_STREAM, text);
  running++;
  const { li, answer, meta, badge, key } = resultItem(resumed, "streaming");
  li.dataset["state"] = "streaming";
  const events = runStream(SCOPE, inputOf(text), { token: TOKEN, waitSeconds: 25 });
  setStatus("running", resumed ? "Resuming the stream after reload…" : "Streaming…");
  try {
    for (;;) {
      const pending = events.next();
      if (key.textContent === "") {
        // The generator has chosen (or found) the action's key before its first request.
        const k = pendingKey(SCOPE, inputOf(text)) ?? "";
        key.textContent = k;
        li.dataset["key"] = k;
        setStatus("running", resumed ? "Resuming the stream after reload…" : "Streaming…", k);
      }
      const n = await pending;
      if (n.done) {
        li.dataset["replay"] = String(n.value.cached);
        li.dataset["reconnects"] = String(n.value.resumed);
        badge.textContent = n.value.cached ? "replay (streamed)" : "first execution (streamed)";
        if (n.value.resumed > 0) meta.append(document.createTextNode(`· reconnected ${n.value.resumed}×`));
        break;
      }
      // A restart event: the stream starts again from its first event.
      if (n.value.type === "restart") answer.textContent = "";
      answer.textContent += contentOf(n.value);
    }
  } catch (err) {
    if (!(err instanceof IdemguardError)) throw err;
    li.classList.add("error");
    badge.textContent = err.status !== undefined ? `error ${err.status}` : "network error";
  } finally {
    li.dataset["state"] = "done";
    settled(text, PENDING_STREAM);
  }
}

document.querySelector<HTMLButtonElement>("#stream")!.addEventListener("click", () => {
  void streamAnswer(prompt.value);
});

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  void generate(prompt.value);
});

// A reload while a call ran: the action still holds its key, so resume it.
const pending = sessionStorage.getItem(PENDING);
if (pending !== null && pendingKey(SCOPE, inputOf(pending)) !== null) {
  prompt.value = pending;
  void generate(pending, true);
}

// A long job: submitted with Prefer: respond-async, followed on the key's
// event stream, reattached after a reload, and cancellable.

const JOB_SCOPE = "demo-job";
// The running job's key reference and prompt, to reattach after a reload.
const JOB = "idemguard-demo:job";

const jobForm = document.querySelector<HTMLFormElement>("#job-form")!;
const jobPrompt = document.querySelector<HTMLTextAreaElement>("#job-prompt")!;
const jobCancel = document.querySelector<HTMLButtonElement>("#job-cancel")!;
const jobStatus = document.querySelector<HTMLElement>("#job-status")!;
const jobAnswer = document.querySelector<HTMLElement>("#job-answer")!;
const jobEvents = document.querySelector<HTMLOListElement>("#job-events")!;
const jobProgressRow = document.querySelector<HTMLElement>("#job-progress-row")!;
const jobProgress = document.querySelector<HTMLProgressElement>("#job-progress")!;
const jobStage = document.querySelector<HTMLElement>("#job-stage")!;

// showProgress shows how far the job got (a progress event, or the record
// of any event: a reload shows where it stands at once); none hides the bar.
function showProgress(p: JobProgress | undefined): void {
  jobProgressRow.hidden = p === undefined;
  const fraction = p?.fraction ?? 0;
  jobProgress.value = fraction;
  jobProgress.dataset["done"] = String(p?.done ?? 0);
  jobStage.textContent = p === undefined ? "" : `${p.stage ?? ""} ${p.done}${p.total ? `/${p.total}` : ""}`.trim();
}

interface RunningJob {
  keyRef: string;
  prompt: string;
}

const jobInput = (text: string) => ({ messages: [{ role: "user", content: text }] });
let current: RunningJob | undefined;

function setJobStatus(state: string, text: string, keyRef?: string, reattached = false): void {
  jobStatus.dataset["state"] = state;
  jobStatus.textContent = text;
  if (keyRef !== undefined) jobStatus.dataset["key"] = keyRef;
  jobStatus.dataset["reattached"] = String(reattached);
  jobCancel.disabled = state !== "running";
}

async function follow(job: RunningJob, reattached: boolean, existing = false): Promise<void> {
  current = job;
  sessionStorage.setItem(JOB, JSON.stringify(job));
  jobEvents.replaceChildren();
  jobAnswer.textContent = "";
  showProgress(undefined);
  setJobStatus("running", reattached ? "Reattached after reload: running…" : existing ? "Joined the job already running…" : "Running…", job.keyRef, reattached);
  jobStatus.dataset["existing"] = String(existing);
  try {
    for await (const e of watchJob(JOB_SCOPE, job.keyRef, { token: TOKEN })) {
      const li = document.createElement("li");
      li.dataset["kind"] = e.event;
      li.textContent = `${e.event} · attempt ${e.attempt} · ${e.at}`;
      jobEvents.append(li);
      showProgress(e.progress ?? e.record.progress);
      if (e.event === "stale") setJobStatus("stale", "The server running this job stopped; start it again to resume.", job.keyRef, reattached);
      if (!isFinal(e)) continue;
      const response = e.record.response;
      if (e.event === "succeeded") {
        const text = response?.data?.["text"];
        jobAnswer.textContent = typeof text === "string" ? text : JSON.stringify(response);
        setJobStatus("succeeded", "Done.", job.keyRef, reattached);
        forgetJob(JOB_SCOPE, jobInput(job.prompt), { action: `demo-job:${job.prompt}` });
      } else if (e.event === "canceled") {
        setJobStatus("canceled", "Canceled. Start it again to re-run it under the same key.", job.keyRef, reattached);
      } else {
        setJobStatus("failed", `Failed: ${response?.stopReason ?? "unknown"}. Start it again to retry.`, job.keyRef, reattached);
      }
      // The job stays in sessionStorage: a reload shows its final state
      // (and its last progress) until another job starts.
    }
  } catch (err) {
    setJobStatus("error", err instanceof Error ? err.message : String(err), job.keyRef, reattached);
  }
}

async function startJob(text: string): Promise<void> {
  setJobStatus("submitting", "Submitting…");
  try {
    const r = await submitJob(JOB_SCOPE, jobInput(text), { token: TOKEN, action: `demo-job:${text}` });
    await follow({ keyRef: r.keyRef, prompt: text }, false, r.existing);
  } catch (err) {
    setJobStatus("error", err instanceof Error ? err.message : String(err));
  }
}

jobForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  void startJob(jobPrompt.value);
});

jobCancel.addEventListener("click", () => {
  if (current === undefined) return;
  jobCancel.disabled = true;
  jobStatus.textContent = "Canceling…";
  cancelJob(JOB_SCOPE, current.keyRef, { token: TOKEN }).catch((err: unknown) => {
    jobStatus.textContent = err instanceof Error ? err.message : String(err);
  });
});

// A reload while the job ran: it runs on, on the server; follow it again.
const saved = sessionStorage.getItem(JOB);
if (saved !== null) {
  const job = JSON.parse(saved) as RunningJob;
  jobPrompt.value = job.prompt;
  void follow(job, true);
}
const pendingStream = sessionStorage.getItem(PENDING_STREAM);
if (pendingStream !== null && pendingKey(SCOPE, inputOf(pendingStream)) !== null) {
  prompt.value = pendingStream;
  void streamAnswer(pendingStream, true);
}
