// Drives the official @ag-ui/client HttpAgent against an /ag-ui/agent URL, exactly as a stock client would:
// no forwardedProps, the agent's own message history, its own verifier on every stream.
// Usage: node httpagent_check.cjs <url> <api-key>; prints one JSON line with what each run saw.
"use strict";
const { HttpAgent } = require("@ag-ui/client");

function recorder() {
  const seen = [];
  return { seen, subscriber: { onEvent: ({ event }) => { seen.push(event); } } };
}

async function run(agent, params) {
  const { seen, subscriber } = recorder();
  await agent.runAgent(params, subscriber);     // rejects if the client's verifier refuses the stream
  return seen;
}

function textOf(events) {
  return events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
}

async function main() {
  const [url, apiKey] = process.argv.slice(2);
  const headers = apiKey ? { "x-api-key": apiKey } : {};
  const report = {};

  const plain = new HttpAgent({ url, headers, threadId: "node-plain" });
  plain.addMessage({ id: "node-m1", role: "user", content: "hello from node" });
  const first = await run(plain, {});
  plain.addMessage({ id: "node-m2", role: "user", content: "and once more" });
  const second = await run(plain, {});
  report.plain = {
    types: first.map((e) => e.type), text: textOf(first), secondTypes: second.map((e) => e.type),
    secondText: textOf(second), messageRoles: plain.messages.map((m) => m.role),
  };

  const asking = new HttpAgent({ url, headers, threadId: "node-interrupt" });
  asking.addMessage({ id: "node-m3", role: "user", content: "write" });
  const interrupted = await run(asking, {});
  const finished = interrupted[interrupted.length - 1];
  const interrupt = finished.outcome.interrupts[0];
  const resumed = await run(asking, {
    resume: [{ interruptId: interrupt.id, status: "resolved", payload: { decision: "allow_once" } }],
  });
  report.interrupt = {
    types: interrupted.map((e) => e.type), outcome: finished.outcome.type, reason: interrupt.reason,
    resumedTypes: resumed.map((e) => e.type), resumedOutcome: resumed[resumed.length - 1].outcome,
    pendingAfter: (asking.pendingInterrupts || []).length,
  };
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((error) => {
  process.stderr.write("HttpAgent failed: " + (error && error.stack ? error.stack : String(error)) + "\n");
  process.exit(1);
});
