// The console page: threads, runs, interrupts, cancel, re-attach. It uses the public API only.

import { $, el, pretty } from "./dom.js";
import { RunConnection, httpError } from "./stream.js";
import { Transcript } from "./render.js";
import { EventLog, PipelinePanel, SessionPanel, StatePanel, UsagePanel } from "./panels.js";
import { AnswerError, interruptForm } from "./forms.js";
import { activeRun, prefs, threads, token } from "./store.js";

const API = new URL("../", import.meta.url);          // the adapter's root, also when mounted under a prefix
const SESSION_EVENT = "iac-code.session.v1";
const CANCEL_PATH = "extensions/iac-code/v1/executions/%s/cancel";

const panels = {
  session: new SessionPanel($("session-panel")), usage: new UsagePanel($("usage-panel")),
  pipeline: new PipelinePanel($("pipeline-panel")), state: new StatePanel($("state-panel")),
};
const log = new EventLog($("event-log"));
const transcript = new Transcript($("transcript"), panels);
const ui = { thread: null, connection: null, executionId: null, forms: [], defaults: {} };

const newId = (prefix) => `${prefix}-${crypto.randomUUID()}`;

function headers() {
  const result = {};
  const secret = token.get();
  if (secret) result.Authorization = `Bearer ${secret}`;
  const language = $("language").value;
  if (language) result["Accept-Language"] = language;
  return result;
}

function setStatus(text, kind = "info") {
  const status = $("run-status");
  status.textContent = text;
  status.dataset.kind = kind;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("send-answers").disabled = busy;
  $("cancel").disabled = !busy;
  $("transcript").setAttribute("aria-busy", busy ? "true" : "false");
}

function askToken(reason) {
  $("token-reason").textContent = reason || "This server may require a bearer token (--auth-token).";
  $("token-input").value = token.get();
  if (!$("token-dialog").open) $("token-dialog").showModal();
}

// A background probe passes ask=false: the token is asked for when the user acts, not on page load.
async function getJson(path, ask = true) {
  const response = await fetch(new URL(path, API), { headers: headers(), cache: "no-store" });
  if (response.status === 401 && ask) askToken("The server needs a valid bearer token.");
  if (!response.ok) throw await httpError(response);
  return response.json();
}

// ---- server probes: /health (always there), /capabilities and /ready (newer servers) ------------------
async function probe() {
  const parts = [];
  try {
    const health = await getJson("health");
    parts.push(`server ${health.serverVersion || "?"} · ${health.status}`);
  } catch (error) {
    parts.push(`server unreachable (${error.message})`);
  }
  parts.push(await readiness());
  try {
    const capabilities = await getJson("capabilities", false);   // behind auth when a token is set
    $("capabilities-panel").textContent = pretty(capabilities);
    ui.defaults = defaultsFrom(capabilities);
    if (!$("cwd").value && ui.defaults.cwd) $("cwd").value = ui.defaults.cwd;
    if (ui.defaults.serverCwd) $("cwd").placeholder = "empty: the server's default workspace";
    if (ui.defaults.grace === 0) parts.push("no reconnect grace: a dropped connection cancels a run");
  } catch (error) {
    $("capabilities-panel").textContent = error.status === 404 ? "This server does not publish /capabilities."
      : `Capabilities unavailable: ${error.code} ${error.message}`;
  }
  $("server-status").textContent = parts.filter(Boolean).join(" · ");
}

// GET /ready: 200 ready, 503 with the failing checks named; a server without it answers 404 (said nothing).
async function readiness() {
  try {
    const response = await fetch(new URL("ready", API), { headers: headers(), cache: "no-store" });
    if (response.status === 404) return "";
    const body = await response.json().catch(() => ({}));
    if (response.ok) return "ready";
    const failing = Array.isArray(body.failing) ? body.failing.join(", ") : "";
    return `not ready${failing ? `: ${failing}` : ` (HTTP ${response.status})`}`;
  } catch (error) {
    return `ready check failed (${error.message})`;
  }
}

// Workspace and run-mode defaults wherever the capabilities document names them.
function defaultsFrom(doc) {
  const found = {};
  const walk = (node, depth) => {
    if (!node || typeof node !== "object" || depth > 6) return;
    for (const [key, value] of Object.entries(node)) {
      if (/^default_?cwd$/i.test(key) && typeof value === "string") found.cwd = found.cwd || value;
      else if (/^default_?run_?mode$/i.test(key) && typeof value === "string") found.runMode = found.runMode || value;
      else walk(value, depth + 1);
    }
  };
  walk(doc, 0);
  const iac = (doc.custom && doc.custom.iacCode) || {};
  found.serverCwd = iac.serverDefaults === true;        // forwardedProps may then be left out
  if (typeof iac.reconnectGraceSeconds === "number") found.grace = iac.reconnectGraceSeconds;
  return found;
}

// ---- threads --------------------------------------------------------------------------------------
function renderThreads() {
  const list = $("thread-list");
  list.replaceChildren(...threads.list().map((t) => el("li", { class: t.threadId === ui.thread.threadId ? "current" : "" },
    el("button", { type: "button", "aria-current": t.threadId === ui.thread.threadId ? "true" : null,
      onclick: () => selectThread(t.threadId) },
    el("span", { class: "title", text: t.title || t.threadId }),
    el("span", { class: "meta", text: `${t.lastOutcome || "no run yet"}${t.lastRunId ? ` · ${t.lastRunId.slice(0, 12)}` : ""}` })))));
}

function saveThread(changes = {}) {
  Object.assign(ui.thread, changes, {
    cwd: $("cwd").value.trim(), runMode: $("run-mode").value, pipelineName: $("pipeline-name").value.trim(),
  });
  threads.save(ui.thread);
  renderThreads();
}

function showThread(thread) {
  ui.thread = thread;
  $("thread-id").textContent = thread.threadId;
  $("cwd").value = thread.cwd || ui.defaults.cwd || prefs.get().cwd || "";
  $("run-mode").value = thread.runMode || ui.defaults.runMode || "";
  $("pipeline-name").value = thread.pipelineName || "";
  transcript.clear();
  for (const panel of Object.values(panels)) panel.clear();
  log.clear();
  if (thread.lastRunId) transcript.notice("Earlier runs of this thread are not kept by the page; pending questions are.");
  showInterrupts(thread.pending || []);
  renderThreads();
}

function selectThread(threadId) {
  if (ui.connection) return;
  showThread(threads.get(threadId) || newThread());
}

function newThread() {
  return { threadId: newId("thread"), rosInvocationId: newId("inv"), title: "", pending: [] };
}

// ---- interrupts -----------------------------------------------------------------------------------
function showInterrupts(interrupts) {
  ui.forms = interrupts.map((interrupt) => interruptForm(interrupt));
  $("interrupt-forms").replaceChildren(...ui.forms.map((f) => f.element));
  $("interrupt-error").textContent = "";
  $("interrupts").hidden = ui.forms.length === 0;
  tick();
  if (ui.forms.length) ui.forms[0].element.querySelector("input")?.focus();
}

function tick() {
  for (const form of ui.forms) form.tick(Date.now());
}

function answer(event) {
  event.preventDefault();
  try {
    if (ui.forms.some((f) => f.expired)) throw new AnswerError("this request has expired; start a new turn");
    const resume = ui.forms.map((f) => f.collect());
    startRun(null, resume);
  } catch (error) {
    if (!(error instanceof AnswerError)) throw error;
    $("interrupt-error").textContent = error.message;
  }
}

// ---- runs -----------------------------------------------------------------------------------------
function runBody(text, resume) {
  const iac = { schemaVersion: 1, rosInvocationId: ui.thread.rosInvocationId, cwd: $("cwd").value.trim() };
  if ($("run-mode").value) iac.runMode = $("run-mode").value;
  if ($("pipeline-name").value.trim()) iac.pipelineName = $("pipeline-name").value.trim();
  // A server with its own default workspace takes a plain RunAgentInput (forwardedProps {}).
  const plain = !iac.cwd && ui.defaults.serverCwd && !iac.runMode && !iac.pipelineName;
  const body = { threadId: ui.thread.threadId, runId: newId("run"), state: {}, tools: [], context: [],
    messages: text === null ? [] : [{ id: newId("msg"), role: "user", content: text }],
    forwardedProps: plain ? {} : { iacCode: iac } };
  if (resume) body.resume = resume;
  return body;
}

function startRun(text, resume) {
  if (ui.connection) return;
  if (!$("cwd").value.trim() && !ui.defaults.serverCwd) {
    setStatus("Enter a workspace directory (cwd) first.", "error");
    $("cwd").focus();
    return;
  }
  const body = runBody(text, resume);
  ui.lastText = text;
  if (text !== null) transcript.userMessage(text);
  prefs.set({ ...prefs.get(), cwd: $("cwd").value.trim() });
  saveThread({ title: ui.thread.title || (text || "").slice(0, 40), lastRunId: body.runId, lastOutcome: "running" });
  follow(body, null);
}

// Attach to `body`'s run: a fresh start (lastEventId null) or a re-attach after a reload.
async function follow(body, lastEventId) {
  ui.executionId = null;
  $("interrupts").hidden = true;
  setBusy(true);
  setStatus(lastEventId === null ? "Running…" : "Re-attaching to the run in progress…", "busy");
  activeRun.set({ body });   // a reload re-attaches to this run and replays it from its first event
  const connection = new RunConnection({
    url: API, body, headers, lastEventId,
    onEvent: (event, id) => {
      if (event.type === "CUSTOM" && event.name === SESSION_EVENT && event.value) ui.executionId = event.value.executionId;
      transcript.event(event);
      log.add(event, id);
    },
    onStatus: (state, detail) => {
      if (state === "reconnecting") {
        setStatus(`Connection lost; reconnecting… (attempt ${detail.attempt}, after event ${detail.after})`, "busy");
        transcript.notice(`Connection lost; reconnecting after event ${detail.after}…`, "warning");
      } else if (state === "reattached") {
        setStatus("Re-attached; the run continues.", "busy");
        transcript.notice(`Re-attached after event ${detail.after}.`);
      } else if (state === "bad-frame") {
        transcript.notice(`an event (id ${detail.id}) is not valid JSON and was skipped: ${detail.reason}`, "warning");
      }
    },
  });
  ui.connection = connection;
  let result;
  try {
    result = await connection.run();
  } catch (error) {
    result = { error: { code: "CLIENT_ERROR", message: error.message } };
  } finally {
    ui.connection = null;
    if (!ui.leaving) activeRun.set(null);   // a reload must find the run to re-attach to
    setBusy(false);
  }
  finish(result, Array.isArray(body.resume));
}

// Errors after which the server no longer waits for the answers that were pending.
const ENDS_INTERRUPTS = new Set(["CANCELLED", "RUN_CANCELLED", "EXECUTION_EXPIRED", "EXECUTION_LOST",
  "RESUME_ALREADY_APPLIED", "A2A_EXECUTION_FAILED"]);

function failed(code, message, resumed) {
  setStatus(`Error ${code}: ${message}`, "error");
  // A refused or failed resume leaves the questions open: show them again so they can be re-answered.
  const pending = resumed && !ENDS_INTERRUPTS.has(code) ? ui.thread.pending || [] : [];
  saveThread({ lastOutcome: `error ${code}`, pending });
  showInterrupts(pending);
}

function finish(result, resumed) {
  if (result.aborted) {
    setStatus("Stopped following the run.");
    saveThread({ lastOutcome: "left" });
  } else if (result.error) {
    const { code, message, status } = result.error;
    if (status === 401) {
      if (ui.lastText && !$("message").value) $("message").value = ui.lastText;  // send it again after the token
      askToken(message);
    }
    transcript.notice(`${code}: ${message}`, "error");
    failed(code, message, resumed);
  } else if (result.terminal.type === "RUN_ERROR") {
    failed(result.terminal.code, result.terminal.message, resumed);
  } else {
    const outcome = result.terminal.outcome || { type: "success" };
    const pending = outcome.type === "interrupt" ? outcome.interrupts || [] : [];
    setStatus(pending.length ? "Waiting for your answer." : `Finished: ${outcome.type}.`, pending.length ? "wait" : "ok");
    saveThread({ lastOutcome: pending.length ? "waiting for an answer" : outcome.type, pending });
    showInterrupts(pending);
  }
}

async function cancelRun() {
  const connection = ui.connection;
  if (!connection) return;
  if (!ui.executionId) {
    // Not announced yet: leaving is the only lever, and the server cancels a run its client left.
    connection.abort();
    transcript.notice("Cancelled by disconnecting (the run was not announced yet).", "warning");
    return;
  }
  setStatus("Cancelling…", "busy");
  const path = CANCEL_PATH.replace("%s", encodeURIComponent(ui.executionId));
  try {
    const response = await fetch(new URL(path, API), { method: "POST", cache: "no-store",
      headers: { ...headers(), "Content-Type": "application/json" },
      // The session event names the invocation (the server derives it when forwardedProps was left out).
      body: JSON.stringify({ threadId: ui.thread.threadId,
        rosInvocationId: panels.session.value.rosInvocationId || ui.thread.rosInvocationId }) });
    if (!response.ok) throw await httpError(response);
    transcript.notice(`Cancel: ${(await response.json()).status}`);
  } catch (error) {
    transcript.notice(`Cancel failed: ${error.code || ""} ${error.message}`, "error");
  }
}

// ---- wiring ---------------------------------------------------------------------------------------
function wire() {
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("message").value.trim();
    if (!text) return;
    $("message").value = "";
    startRun(text, null);
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("composer").requestSubmit();
  });
  $("interrupts").addEventListener("submit", answer);
  $("cancel").addEventListener("click", cancelRun);
  $("new-thread").addEventListener("click", () => { if (!ui.connection) showThread(newThread()); });
  for (const id of ["cwd", "run-mode", "pipeline-name"]) $(id).addEventListener("change", () => { if (ui.thread.lastRunId) saveThread(); });
  $("language").value = prefs.get().language || "";
  $("language").addEventListener("change", () => prefs.set({ ...prefs.get(), language: $("language").value }));
  $("token-button").addEventListener("click", () => askToken());
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    token.set($("token-input").value.trim());
    $("token-dialog").close();
    probe();
  });
  $("token-clear").addEventListener("click", () => { token.set(""); $("token-input").value = ""; });
  $("token-close").addEventListener("click", () => $("token-dialog").close());
  setInterval(tick, 1000);
  window.addEventListener("pagehide", () => { ui.leaving = true; });
}

function start() {
  wire();
  const pending = activeRun.get();
  const known = pending && threads.get(pending.body.threadId);
  showThread(known || threads.list()[0] || newThread());
  probe();
  if (known) {
    transcript.notice(`The page was reloaded during run ${pending.body.runId}; re-attaching.`);
    follow(pending.body, "0");
  }
}

start();
