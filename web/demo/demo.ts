// The demo page of `idemguard serve` in development mode: a prompt, a
// Generate button wired to @idemguard/client, and the answers with whether
// each was a replay and its key.

import { contentOf, IdemguardError, pendingKey, run, runStream, type RunResult } from "../src/index.js";

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

function show(res: RunResult | IdemguardError, resumed: boolean): void {
  const li = document.createElement("li");
  li.className = "result";
  const answer = document.createElement("p");
  answer.className = "answer";
  const meta = document.createElement("div");
  meta.className = "meta";
  const badge = document.createElement("span");
  badge.className = "badge";
  const key = document.createElement("code");
  key.className = "key";
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
  meta.append(badge, document.createTextNode("key"), key);
  if (resumed) meta.append(document.createTextNode("· resumed after reload"));
  li.append(answer, meta);
  results.prepend(li);
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
    running--;
    if (pendingKey(SCOPE, inputOf(text)) === null && sessionStorage.getItem(PENDING) === text) {
      sessionStorage.removeItem(PENDING);
    }
    if (running === 0) setStatus("idle", "");
  }
}

// A streamed answer: shown word by word as the events arrive. A reload in
// the middle resumes the action with its key and shows the stream again from
// its first word (the running execution, or its stored events).
async function streamAnswer(text: string, resumed = false): Promise<void> {
  sessionStorage.setItem(PENDING_STREAM, text);
  running++;
  const li = document.createElement("li");
  li.className = "result";
  li.dataset["state"] = "streaming";
  const answer = document.createElement("p");
  answer.className = "answer";
  const meta = document.createElement("div");
  meta.className = "meta";
  const badge = document.createElement("span");
  badge.className = "badge";
  badge.textContent = "streaming";
  const key = document.createElement("code");
  key.className = "key";
  meta.append(badge, document.createTextNode("key"), key);
  if (resumed) meta.append(document.createTextNode("· resumed after reload"));
  li.append(answer, meta);
  results.prepend(li);
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
        badge.textContent = n.value.cached ? "replay (streamed)" : "first execution (streamed)";
        break;
      }
      answer.textContent += contentOf(n.value);
    }
  } catch (err) {
    if (!(err instanceof IdemguardError)) throw err;
    li.classList.add("error");
    badge.textContent = err.status !== undefined ? `error ${err.status}` : "network error";
  } finally {
    li.dataset["state"] = "done";
    running--;
    if (pendingKey(SCOPE, inputOf(text)) === null && sessionStorage.getItem(PENDING_STREAM) === text) {
      sessionStorage.removeItem(PENDING_STREAM);
    }
    if (running === 0) setStatus("idle", "");
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
const pendingStream = sessionStorage.getItem(PENDING_STREAM);
if (pendingStream !== null && pendingKey(SCOPE, inputOf(pendingStream)) !== null) {
  prompt.value = pendingStream;
  void streamAnswer(pendingStream, true);
}
