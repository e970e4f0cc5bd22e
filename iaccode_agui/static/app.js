// The console page: threads, runs, interrupts, stop, re-attach. It uses the public API only.
//
// Runs go to the AgentCore route (POST ag-ui/agent): a closed connection does not stop a run there, so a
// cut network or a page reload is followed by a re-attach, never by a cancelled run, whatever the server's
// --reconnect-grace. Stop is explicit (POST ag-ui/agent/stop). Every request names the thread it belongs
// to in X-AgentCore-Session-ID, so a load balancer hashing that header keeps the thread on one host.

import { $, el, pretty } from "./dom.js";
import { RunConnection, SESSION_HEADER, STOP_PATH, httpError, runRequests } from "./stream.js";
import { STOPPED, Transcript } from "./render.js";
import { EventLog, PipelinePanel, SessionPanel, StatePanel, UsagePanel } from "./panels.js";
import { AnswerError, interruptForm } from "./forms.js";
import { historyPath, pendingAfter, pendingIn } from "./history.js";
import { loadCatalogs, resolveLanguage, setLanguage, t, tr, translatePage } from "./i18n.js";
import { activeRun, prefs, threads, token } from "./store.js";

const API = new URL("../", import.meta.url);          // the adapter's root, also when mounted under a prefix

const panels = {
  session: new SessionPanel($("session-panel")), usage: new UsagePanel($("usage-panel")),
  pipeline: new PipelinePanel($("pipeline-panel")), state: new StatePanel($("state-panel")),
};
const log = new EventLog($("event-log"));
const transcript = new Transcript($("transcript"), panels);
const ui = { thread: null, connection: null, running: null, loading: null, forms: [], defaults: {} };

const newId = (prefix) => `${prefix}-${crypto.randomUUID()}`;

// Request headers: the token, the picked language, and the thread the request belongs to.
function headers(threadId = ui.thread && ui.thread.threadId) {
  const result = {};
  const secret = token.get();
  if (secret) result.Authorization = `Bearer ${secret}`;
  const language = $("language").value;
  if (language) result["Accept-Language"] = language;
  // fetch() refuses a header value outside Latin-1 and the server compares bytes: ASCII ids only.
  if (threadId && /^[\x20-\x7e]+$/.test(threadId)) result[SESSION_HEADER] = threadId;
  return result;
}

// `content`: a label from tr() (relabelled on a language switch) or text as it came.
function setStatus(content, kind = "info") {
  const status = $("run-status");
  status.replaceChildren(el("span", typeof content === "string" ? { text: content } : content));
  status.dataset.kind = kind;
}

function setBusy(busy, stoppable = busy) {
  $("send").disabled = busy;
  $("send-answers").disabled = busy;
  $("cancel").disabled = !stoppable;
  $("transcript").setAttribute("aria-busy", busy ? "true" : "false");
}

function askToken(reason) {
  $("token-reason").textContent = reason || t("This server may require a bearer token (--auth-token).");
  $("token-input").value = token.get();
  if (!$("token-dialog").open) $("token-dialog").showModal();
}

// A background probe passes ask=false: the token is asked for when the user acts, not on page load.
async function getJson(path, ask = true) {
  const response = await fetch(new URL(path, API), { headers: headers(), cache: "no-store" });
  if (response.status === 401 && ask) askToken(t("The server needs a valid bearer token."));
  if (!response.ok) throw await httpError(response);
  return response.json();
}

// ---- server probes: /health (always there), /capabilities and /ready (newer servers) ------------------
async function probe() {
  const parts = [];
  try {
    const health = await getJson("health");
    parts.push(t("server {version} · {status}", { version: health.serverVersion || "?", status: health.status }));
  } catch (error) {
    parts.push(t("server unreachable ({reason})", { reason: error.message }));
  }
  parts.push(await readiness());
  try {
    const capabilities = await getJson("capabilities", false);   // behind auth when a token is set
    $("capabilities-panel").textContent = pretty(capabilities);
    ui.defaults = defaultsFrom(capabilities);
    if (!$("cwd").value && ui.defaults.cwd) $("cwd").value = ui.defaults.cwd;
    if (ui.defaults.serverCwd) $("cwd").placeholder = t("empty: the server's default workspace");
  } catch (error) {
    $("capabilities-panel").textContent = error.status === 404 ? t("This server does not publish /capabilities.")
      : t("Capabilities unavailable: {code} {message}", { code: error.code, message: error.message });
  }
  $("server-status").textContent = parts.filter(Boolean).join(" · ");
}

// GET /ready: 200 ready, 503 with the failing checks named; a server without it answers 404 (said nothing).
async function readiness() {
  try {
    const response = await fetch(new URL("ready", API), { headers: headers(), cache: "no-store" });
    if (response.status === 404) return "";
    const body = await response.json().catch(() => ({}));
    if (response.ok) return t("ready");
    const failing = Array.isArray(body.failing) ? body.failing.join(", ") : "";
    return failing ? t("not ready: {failing}", { failing }) : t("not ready (HTTP {status})", { status: response.status });
  } catch (error) {
    return t("ready check failed ({reason})", { reason: error.message });
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
  return found;
}

// ---- threads --------------------------------------------------------------------------------------
// A thread's last outcome as stored ("error CODE" or one of these words) and as shown, in the current language.
const OUTCOMES = { running: () => t("running"), "waiting for an answer": () => t("waiting for an answer"),
  stopped: () => t("stopped"), left: () => t("left"), success: () => t("finished") };

function outcomeLabel(outcome) {
  if (!outcome) return t("no run yet");
  if (outcome.startsWith("error ")) return t("error {code}", { code: outcome.slice("error ".length) });
  return OUTCOMES[outcome] ? OUTCOMES[outcome]() : outcome;
}

function renderThreads() {
  const list = $("thread-list");
  list.replaceChildren(...threads.list().map((th) => el("li", { class: th.threadId === ui.thread.threadId ? "current" : "" },
    el("button", { type: "button", "aria-current": th.threadId === ui.thread.threadId ? "true" : null,
      onclick: () => selectThread(th.threadId) },
    el("span", { class: "title", text: th.title || th.threadId }),
    el("span", { class: "meta", text: `${outcomeLabel(th.lastOutcome)}${th.lastRunId ? ` · ${th.lastRunId.slice(0, 12)}` : ""}` })))));
}

function saveThread(changes = {}) {
  Object.assign(ui.thread, changes, {
    cwd: $("cwd").value.trim(), runMode: $("run-mode").value, pipelineName: $("pipeline-name").value.trim(),
  });
  threads.save(ui.thread);
  renderThreads();
}

// Show a thread: its settings, its conversation as the server keeps it, and the questions it still waits on
// (the ones the stored conversation leaves unanswered; what this browser remembered when the server cannot
// say). `reattaching`: a run about to be re-attached (after a reload), whose forms come with its events.
async function showThread(thread, reattaching = false) {
  ui.loading = null;
  setBusy(false);
  ui.thread = thread;
  $("thread-id").textContent = thread.threadId;
  $("cwd").value = thread.cwd || ui.defaults.cwd || prefs.get().cwd || "";
  $("run-mode").value = thread.runMode || ui.defaults.runMode || "";
  $("pipeline-name").value = thread.pipelineName || "";
  transcript.clear();
  for (const panel of Object.values(panels)) panel.clear();
  log.clear();
  showInterrupts([]);
  renderThreads();
  let pending = thread.pending || [];
  let stored = null;
  if (!thread.lastRunId) return showPending(pending);      // a thread no run of which was sent yet
  const loading = {};
  ui.loading = loading;
  setBusy(true, false);
  setStatus(tr("Loading the conversation…"), "busy");
  try {
    stored = await getJson(historyPath(thread.threadId));
  } catch (error) {
    if (error.code !== "THREAD_NOT_FOUND") {
      transcript.notice(tr("The conversation could not be loaded: {code} {message}", { code: error.code, message: error.message }), "error");
    }
  }
  if (ui.loading !== loading) return false;    // another thread was opened meanwhile
  ui.loading = null;
  setBusy(false);
  if (stored) {
    if (stored.truncated) transcript.notice(tr("The server keeps only the newest part of this conversation."));
    transcript.show(stored.messages);
    pending = pendingIn(stored.messages);
    if (JSON.stringify(pending) !== JSON.stringify(thread.pending || [])) saveThread({ pending });
  }
  return reattaching || showPending(pending);
}

function showPending(pending) {
  showInterrupts(pending);
  setStatus(pending.length ? tr("Waiting for your answer.") : tr("Idle"), pending.length ? "wait" : "info");
  return true;
}

function selectThread(threadId) {
  if (ui.connection) return;
  showThread(threads.get(threadId) || newThread());
}

function newThread() {
  return { threadId: newId("thread"), rosInvocationId: newId("inv"), title: "", pending: [] };
}

// ---- interrupts -----------------------------------------------------------------------------------
function showInterrupts(interrupts, focus = true) {
  ui.forms = interrupts.map((interrupt) => interruptForm(interrupt));
  $("interrupt-forms").replaceChildren(...ui.forms.map((f) => f.element));
  $("interrupt-error").textContent = "";
  $("interrupts").hidden = ui.forms.length === 0;
  tick();
  if (ui.forms.length && focus) ui.forms[0].element.querySelector("input")?.focus();
}

// The forms built again in the current language, with what was entered in them.
function relabelForms() {
  const values = ui.forms.map((f) => f.values());
  showInterrupts(ui.forms.map((f) => f.interrupt), false);
  ui.forms.forEach((f, n) => f.restore(values[n]));
}

// Questions the agent still waits on: the server refuses a new message until they are answered or declined
// (or have expired: then the forms say to start a new turn).
const waiting = () => ui.forms.length > 0 && !ui.forms.some((f) => f.expired);

function tick() {
  for (const form of ui.forms) form.tick(Date.now());
}

function answer(event) {
  event.preventDefault();
  try {
    if (ui.forms.some((f) => f.expired)) throw new AnswerError(t("this request has expired; start a new turn"));
    const resume = ui.forms.map((f) => f.collect());
    startRun(null, resume, ui.forms.map((f, n) => f.said(resume[n])).join("\n"));
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

// Start a run: a message (`text`), or the answers to the pending questions (`resume`, `said` in words).
// False when it cannot start: the status says why and the message stays in its box.
function startRun(text, resume, said = null) {
  if (ui.connection || ui.loading) return false;
  if (!$("cwd").value.trim() && !ui.defaults.serverCwd) {
    setStatus(tr("Enter a workspace directory (cwd) first."), "error");
    $("cwd").focus();
    return false;
  }
  if (text !== null && waiting()) {
    setStatus(tr("Answer or decline the questions above first; your message is kept."), "error");
    ui.forms[0].element.querySelector("input")?.focus();
    return false;
  }
  ui.thread = threads.get(ui.thread.threadId) || ui.thread;   // with what another tab added to the thread
  const body = runBody(text, resume);
  const shown = text ?? said;
  ui.lastText = text;
  if (shown) transcript.userMessage(shown, text === null ? null : body.messages[0].id);
  prefs.set({ ...prefs.get(), cwd: $("cwd").value.trim() });
  saveThread({ title: ui.thread.title || (text || "").slice(0, 40), lastRunId: body.runId, lastOutcome: "running" });
  follow(body, false, shown);
  return true;
}

function onRunStatus(state, detail) {
  if (state === "reconnecting") {
    setStatus(tr("Connection lost; reconnecting… (attempt {attempt}, after event {after})", detail), "busy");
    transcript.notice(tr("Connection lost; reconnecting after event {after}…", detail), "warning");
  } else if (state === "reattached") {
    setStatus(tr("Re-attached; the run continues."), "busy");
    transcript.notice(tr("Re-attached after event {after}.", detail));
  } else if (state === "bad-frame") {
    transcript.notice(tr("An event (id {id}) is not valid JSON and was skipped: {reason}", detail), "warning");
  }
}

// Follow `body`'s run (`shown`: what the user said in it): a fresh start, or (reattach) a run already under
// way, replayed from its start.
async function follow(body, reattach, shown) {
  showInterrupts([]);
  setBusy(true);
  setStatus(reattach ? tr("Re-attaching to the run in progress…") : tr("Running…"), "busy");
  activeRun.set({ body, shown });   // a reload re-attaches to this run and replays it from its first event
  const connection = new RunConnection({
    api: API, threadId: body.threadId, requests: runRequests(body), headers: () => headers(body.threadId), reattach,
    onEvent: (event, id) => {
      transcript.event(event);
      log.add(event, id);
    },
    onStatus: onRunStatus,
  });
  ui.connection = connection;
  ui.running = { threadId: body.threadId, runId: body.runId };
  let result;
  try {
    result = await connection.run();
  } catch (error) {
    result = { error: { code: "CLIENT_ERROR", message: error.message } };
  } finally {
    ui.connection = null;
    ui.running = null;
    if (!ui.leaving) activeRun.set(null);   // a reload must find the run to re-attach to
    setBusy(false);
  }
  finish(result, body);
}

// A run that ended with an error, or stopped: the questions its error leaves open (`pending`) are shown again.
function failed(code, message, pending, stopAsked) {
  if (stopAsked && STOPPED.has(code)) setStatus(tr("Stopped."), "ok");
  else setStatus(tr("Error {code}: {message}", { code, message }), "error");
  saveThread({ lastOutcome: STOPPED.has(code) ? "stopped" : `error ${code}`, pending });
  showInterrupts(pending);
}

function finish(result, body) {
  const pending = result.aborted ? ui.thread.pending || [] : pendingAfter(ui.thread.pending || [], result, Array.isArray(body.resume));
  const stopAsked = ui.stopAsked === body.runId;
  if (result.aborted) {
    setStatus(tr("Stopped following the run."));
    saveThread({ lastOutcome: "left" });
  } else if (result.error) {
    const { code, message, status } = result.error;
    if (status >= 400) {
      // Refused: the run never started. Its message goes back in the box (e.g. to send after the token).
      if (ui.lastText && !$("message").value) $("message").value = ui.lastText;
    }
    if (status === 401) askToken(message);
    if (code === "RESUME_REQUIRED") {
      resync(code, message);
      return;
    }
    transcript.notice(`${code}: ${message}`, "error");
    failed(code, message, pending, stopAsked);
  } else if (result.terminal.type === "RUN_ERROR") {
    failed(result.terminal.code, result.terminal.message, pending, stopAsked);
  } else {
    const outcome = result.terminal.outcome || { type: "success" };
    setStatus(pending.length ? tr("Waiting for your answer.") : tr("Finished: {outcome}.", { outcome: outcome.type }),
      pending.length ? "wait" : "ok");
    saveThread({ lastOutcome: pending.length ? "waiting for an answer" : outcome.type, pending });
    showInterrupts(pending);
  }
}

// The server waits on answers this page does not show (asked in another tab): the thread is shown again, its
// stored conversation names the questions. The refused message stays in its box.
async function resync(code, message) {
  saveThread({ lastOutcome: `error ${code}` });
  if (!(await showThread(ui.thread))) return;
  setStatus(ui.forms.length ? tr("Answer or decline the questions above first; your message is kept.")
    : tr("Error {code}: {message}", { code, message }), "error");
}

// Stop: the server cancels the run and its live stream ends with RUN_ERROR RUN_CANCELLED, which is what
// ends the busy state (also when the stream is being re-attached at that moment) and reads as stopped.
async function cancelRun() {
  const run = ui.running;
  if (!ui.connection || !run) return;
  setStatus(tr("Stopping the run…"), "busy");
  ui.stopAsked = run.runId;
  try {
    const response = await fetch(new URL(STOP_PATH, API), { method: "POST", cache: "no-store",
      headers: { ...headers(run.threadId), "Content-Type": "application/json" },
      body: JSON.stringify({ threadId: run.threadId, runId: run.runId }) });
    if (!response.ok) throw await httpError(response);
  } catch (error) {
    ui.stopAsked = null;
    transcript.notice(tr("Stop failed: {code} {message}", { code: error.code || "", message: error.message }), "error");
  }
}

// ---- language -------------------------------------------------------------------------------------
// Everything on screen in the picked language: the page, the transcript and the status (their labels carry
// their English text, see i18n.js tr), the panels, the thread list and the answer forms.
function applyLanguage() {
  setLanguage(resolveLanguage($("language").value));
  translatePage();
  for (const panel of Object.values(panels)) if (panel.relabel) panel.relabel();
  if (ui.thread) renderThreads();
  if (ui.forms.length) relabelForms();
}

// ---- wiring ---------------------------------------------------------------------------------------
function wire() {
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("message").value.trim();
    if (text && startRun(text, null)) $("message").value = "";
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("composer").requestSubmit();
  });
  $("interrupts").addEventListener("submit", answer);
  $("cancel").addEventListener("click", cancelRun);
  $("new-thread").addEventListener("click", () => { if (!ui.connection) showThread(newThread()); });
  for (const id of ["cwd", "run-mode", "pipeline-name"]) $(id).addEventListener("change", () => { if (ui.thread.lastRunId) saveThread(); });
  $("language").value = prefs.get().language || "";
  $("language").addEventListener("change", () => {
    prefs.set({ ...prefs.get(), language: $("language").value });
    applyLanguage();
    probe();
  });
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

async function start() {
  await loadCatalogs();
  wire();
  applyLanguage();
  const active = activeRun.get();
  const known = active && threads.get(active.body.threadId);
  const shown = showThread(known || threads.list()[0] || newThread(), Boolean(known));
  probe();      // after the thread is chosen: the probes carry its session header too
  if (!known || !(await shown)) return;
  // The run's own message is stored when the run ends: shown here, with its id, before the run's events.
  const message = active.body.messages[0];
  if (active.shown) transcript.userMessage(active.shown, message ? message.id : null);
  transcript.notice(tr("The page was reloaded during run {run}; re-attaching.", { run: active.body.runId }));
  follow(active.body, true, active.shown);
}

start();
