// Drives the adapter the way a CopilotKit app does, headless and offline: a @copilotkit/runtime server (in this
// process, on 127.0.0.1 port 0) whose only agent is a plain @ag-ui/client HttpAgent pointing at the adapter, and
// @copilotkit/core (what @copilotkit/react-core runs under React) talking to that runtime over HTTP.
// Usage: node copilotkit_check.cjs '<json config>'; prints one JSON line: {case name: result or {error}}.
// Config: {route: "agent"|"root", adapter: base URL, apiKey, cwd, stopAgentModule: the how-to's subclass, cases}.
"use strict";
process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
const http = require("node:http");
const net = require("node:net");
const { createRequire } = require("node:module");
const { pathToFileURL } = require("node:url");

// No network but loopback: any other connection attempt is refused and reported.
const offLoopback = [];
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function guarded(...args) {
  const [first, second] = args;
  const host = typeof first === "object" && first !== null ? (first.path === undefined ? first.host : undefined)
    : typeof first === "number" && typeof second === "string" ? second : undefined;   // else a Unix socket path
  if (![undefined, "127.0.0.1", "localhost", "::1"].includes(host)) {
    offLoopback.push(String(host));
    throw new Error("test driver: no network but loopback (" + host + ")");
  }
  return connect.apply(this, args);
};

// @copilotkit/core only connects to its runtime in a browser (`typeof window`); this is all it needs of one.
globalThis.window = {};

const { CopilotKitCore, ɵInterruptState } = require("@copilotkit/core");
const { CopilotRuntime } = require("@copilotkit/runtime/v2");
const { createCopilotNodeListener } = require("@copilotkit/runtime/v2/node");
// The AG-UI client the runtime itself depends on (0.0.59 for runtime 1.75): its HttpAgent is the app's agent,
// and its event schemas are what the runtime applies to every event of ours.
const runtimeRequire = createRequire(require.resolve("@copilotkit/runtime"));
const { HttpAgent, randomUUID } = runtimeRequire("@ag-ui/client");
const { EventSchemas } = runtimeRequire("@ag-ui/core");
const { z } = require("zod");

const config = JSON.parse(process.argv[2]);
const wire = [];        // every request the runtime's HttpAgent made to the adapter: {url, body, status, events}
const clientRuns = [];  // every run as the page saw it: {runId, types}

function adapterUrl(base) {
  return config.route === "agent" ? base + "ag-ui/agent" : base;
}

function adapterHeaders() {
  return config.route === "agent" ? { "x-api-key": config.apiKey } : { Authorization: "Bearer " + config.apiKey };
}

// The HttpAgent's fetch, recording what the wire carries both ways (the body it sent, the events it got).
async function recordingFetch(url, init) {
  const entry = { url: String(url), body: JSON.parse(init.body), status: 0, events: [], invalid: [] };
  wire.push(entry);
  const response = await fetch(url, init);
  entry.status = response.status;
  readEvents(response.clone(), entry).catch(() => {});   // an aborted stream just ends the record
  return response;
}

async function readEvents(response, entry) {
  const text = await response.text();
  for (const record of text.split(/\r?\n\r?\n/)) {
    const data = record.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
    if (!data || response.status !== 200) continue;
    const event = JSON.parse(data);
    entry.events.push(event);
    const parsed = EventSchemas.safeParse(event);
    if (!parsed.success) entry.invalid.push({ type: event.type, error: parsed.error.message });
  }
}

async function startRuntime(agent) {
  const runtime = new CopilotRuntime({ agents: { default: agent } });
  const server = http.createServer(createCopilotNodeListener({ runtime, basePath: "/api/copilotkit",
                                                              activateChannels: false }));
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return "http://127.0.0.1:" + server.address().port + "/api/copilotkit";
}

// One browser page: a CopilotKitCore on the runtime, its agent on one thread, and everything it observed.
async function page(runtimeUrl, threadId) {
  const properties = config.route === "root"
    ? { iacCode: { schemaVersion: 1, rosInvocationId: "copilotkit-" + threadId, cwd: config.cwd } } : {};
  const core = new CopilotKitCore({ runtimeUrl, properties });
  const view = { core, events: [], errors: [] };
  core.subscribe({ onError: ({ error, code }) => { view.errors.push({ code, message: String(error.message) }); } });
  for (let i = 0; i < 500 && !core.getAgent("default"); i++) await sleep(10);
  view.agent = core.getAgent("default");
  if (!view.agent) throw new Error("no agent from the runtime (status " + core.runtimeConnectionStatus + ")");
  view.agent.threadId = threadId;
  let open = false;   // a RUN_ERROR the runtime sends for a refused request comes without a RUN_STARTED
  view.agent.subscribe({ onEvent: ({ event }) => {
    if (event.type === "RUN_STARTED" || !open) clientRuns.push({ runId: event.runId || null, types: [] });
    clientRuns[clientRuns.length - 1].types.push(event.type);
    open = !/^RUN_(FINISHED|ERROR)$/.test(event.type);
    view.events.push(event);
  } });
  // What CopilotChat does on submit (CopilotChat.tsx): add the user message, then copilotkit.runAgent.
  view.send = async (text) => {
    const mark = view.mark();
    view.agent.addMessage({ id: randomUUID(), role: "user", content: text });
    await core.runAgent({ agent: view.agent });
    return mark();
  };
  // A summary of what happened from now on: events, text, errors, and the conversation as the app shows it.
  view.mark = () => {
    const events = view.events.length;
    const errors = view.errors.length;
    return () => summary(view.events.slice(events), view.errors.slice(errors), view.agent);
  };
  return view;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function summary(events, errors, agent) {
  const last = events[events.length - 1] || {};
  return {
    types: events.map((e) => e.type),
    text: events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join(""),
    events: events.filter((e) => /^(TEXT_MESSAGE_(START|END)|TOOL_CALL_(START|RESULT))$/.test(e.type)).map(
      (e) => ({ type: e.type, messageId: e.messageId, toolCallId: e.toolCallId, parentMessageId: e.parentMessageId })),
    last: { type: last.type, code: last.code || null, message: last.message || null, outcome: last.outcome || null },
    errors,
    messages: agent.messages.filter((m) => m.role !== "reasoning").map((m) => ({
      id: m.id, role: m.role, content: typeof m.content === "string" ? m.content : null,
      toolCalls: (m.toolCalls || []).map((c) => ({ id: c.id, name: c.function.name })),
      toolCallId: m.toolCallId || null,
    })),
  };
}

// How a run ended on the adapter, read back with an attach (/ag-ui/agent only) after its first event.
async function adapterRunEnd(threadId, runId) {
  const body = { threadId, runId, messages: [], state: {}, tools: [], context: [],
                 forwardedProps: { agentcore: { attach: { afterSequence: 0 } } } };
  const response = await fetch(config.adapter + "ag-ui/agent", { method: "POST", body: JSON.stringify(body),
    headers: { ...adapterHeaders(), "Content-Type": "application/json", Accept: "text/event-stream" },
    signal: AbortSignal.timeout(20000) });
  const entry = { events: [], invalid: [] };
  await readEvents(response, entry);
  const last = entry.events[entry.events.length - 1] || {};
  return { status: response.status, type: last.type || null, code: last.code || null };
}

const CASES = {
  async chat(runtimeUrl) {
    const view = await page(runtimeUrl, "ck-chat-" + config.route);
    return view.send("hello from copilotkit");
  },

  async twoTurns(runtimeUrl) {
    const view = await page(runtimeUrl, "ck-turns-" + config.route);
    return { first: await view.send("first turn"), second: await view.send("second turn") };
  },

  // A CopilotKit runtime that lost its memory (restarted): a fresh runtime and a fresh page on a thread that
  // already has two turns. The page sends only its new message; the adapter's MESSAGES_SNAPSHOT gives the
  // conversation back, so the page's agent ends the run holding all of it.
  async lostMemory(runtimeUrl) {
    const threadId = "ck-lost-" + config.route;
    const before = await page(runtimeUrl, threadId);
    const first = await before.send("first turn");
    const second = await before.send("second turn");
    const fresh = new HttpAgent({ url: adapterUrl(config.adapter), headers: adapterHeaders(), fetch: recordingFetch });
    const after = await page(await startRuntime(fresh), threadId);
    const third = await after.send("third turn");
    return { first, second, third, sentMessages: wire[wire.length - 1].body.messages.map((m) => m.id) };
  },

  async serverTool(runtimeUrl) {
    const view = await page(runtimeUrl, "ck-tool-" + config.route);
    return view.send("use a tool");
  },

  // useInterrupt (react-core src/v2/hooks/use-interrupt.tsx): the interrupts of RUN_FINISHED go into the core's
  // ɵInterruptState, each remembered with the run that raised it; resolve() adds a role "tool" message per
  // tool-call interrupt and runs the agent again with `resume` and the interrupted run's runId.
  async interrupt(runtimeUrl) {
    const view = await page(runtimeUrl, "ck-interrupt-" + config.route);
    const state = new ɵInterruptState();
    const runIds = new Map();
    view.agent.subscribe({ onRunFinishedEvent: (params) => {
      if (params.outcome !== "interrupt") return;
      for (const interrupt of params.interrupts) runIds.set(interrupt.id, params.input.runId);
      state.setStandard(params.interrupts);
    } });
    const asked = await view.send("write a file");
    if (!state.pending) return { asked };
    const interrupt = state.pending.interrupts[0];
    const decision = state.resolve({ decision: "allow_once" });
    const runId = decision.resume.map((entry) => runIds.get(entry.interruptId)).find((id) => id);
    const mark = view.mark();
    for (const result of decision.toolResults) {
      view.agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: result.toolCallId, content: result.content });
    }
    await view.core.runAgent({ agent: view.agent, resume: decision.resume, ...(runId ? { runId } : {}) });
    const sent = wire[wire.length - 1].body;
    return { asked, interrupt, interruptedRunId: runId, resumed: mark(),
             sent: { runId: sent.runId, resume: sent.resume, lastMessage: sent.messages[sent.messages.length - 1] } };
  },

  // CopilotChat's stop button: copilotkit.stopAgent, which reaches the HttpAgent as abortRun() (the HTTP request
  // to the adapter is aborted, nothing else), then the user's next message on the same thread.
  async stop(runtimeUrl) {
    return stopThenContinue(runtimeUrl, "ck-stop-" + config.route, false);
  },

  // useFrontendTool: copilotkit.addTool with a zod schema; the core sends it with every run.
  async frontendTool(runtimeUrl) {
    const view = await page(runtimeUrl, "ck-fetool-" + config.route);
    view.core.addTool({ name: "showBanner", description: "Show a banner in the page",
                        parameters: z.object({ text: z.string() }), handler: async () => "shown" });
    const result = await view.send("hello with a banner");
    result.sentTools = wire[wire.length - 1].body.tools.map((t) => t.name);
    return result;
  },

  async runError(runtimeUrl) {
    const view = await page(runtimeUrl, "ck-error-" + config.route);
    return { failed: await view.send("please fail"), after: await view.send("are you there") };
  },

  // The how-to's HttpAgent subclass whose abortRun() also posts /ag-ui/agent/stop: the stop is immediate, so the
  // run has ended (RUN_CANCELLED) before the user says anything else.
  async stopNow() {
    const { StoppableHttpAgent } = await import(pathToFileURL(config.stopAgentModule).href);
    const runtimeUrl = await startRuntime(new StoppableHttpAgent({ url: adapterUrl(config.adapter),
                                                                   headers: adapterHeaders() }));
    return stopThenContinue(runtimeUrl, "ck-stopnow-" + config.route, true);
  },
};

async function stopThenContinue(runtimeUrl, threadId, immediate) {
  const view = await page(runtimeUrl, threadId);
  const mark = view.mark();
  view.agent.addMessage({ id: randomUUID(), role: "user", content: "slow" });
  const running = view.core.runAgent({ agent: view.agent });
  for (let i = 0; i < 1000 && !view.events.some((e) => e.type === "TEXT_MESSAGE_CONTENT"); i++) await sleep(10);
  view.core.stopAgent({ agent: view.agent });
  await running;
  const stopped = mark();
  const runId = view.events[0].runId;
  const endBefore = immediate ? await adapterRunEnd(threadId, runId) : null;
  const next = await view.send("hello again");
  // The stopped run's own end on the adapter, once the next message was admitted (attach is /ag-ui/agent's).
  const end = endBefore || (config.route === "agent" && next.last.type === "RUN_FINISHED"
    ? await adapterRunEnd(threadId, runId) : null);
  return { stopped, next, adapterEnd: end };
}

async function main() {
  const agent = new HttpAgent({ url: adapterUrl(config.adapter), headers: adapterHeaders(), fetch: recordingFetch });
  const runtimeUrl = await startRuntime(agent);
  const report = {};
  for (const name of config.cases) {
    try {
      report[name] = await CASES[name](runtimeUrl);
    } catch (error) {
      report[name] = { error: String(error && error.stack ? error.stack : error) };
    }
  }
  await sleep(50);   // the copies of the last streams finish reading
  // Each run the adapter streamed to its end, as the runtime received it and as the page saw it (same order).
  const ended = (w) => w.status === 200 && /^RUN_(FINISHED|ERROR)$/.test((w.events[w.events.length - 1] || {}).type);
  report.wire = wire.filter(ended).map((w) => ({ runId: w.body.runId, types: w.events.map((e) => e.type) }));
  report.invalid = wire.flatMap((w) => w.invalid);
  report.clientRuns = clientRuns;
  report.offLoopback = offLoopback;
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exit(0);   // the runtime keeps sockets and timers open
}

main().catch((error) => {
  process.stderr.write("copilotkit driver failed: " + (error && error.stack ? error.stack : String(error)) + "\n");
  process.exit(1);
});
