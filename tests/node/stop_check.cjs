// Stop on /ag-ui/agent the two ways a stock @ag-ui/client HttpAgent can: abortRun() alone (it only drops the
// stream; the next message on the thread stops the run), and the documented subclass whose abortRun() also
// posts /ag-ui/agent/stop (the run stops at once).
// Usage: node stop_check.cjs <url> <api-key>; prints one JSON line with what each agent saw.
"use strict";
const { HttpAgent } = require("@ag-ui/client");

// The subclass of docs/resume-and-stop.rst, verbatim.
class StoppingHttpAgent extends HttpAgent {
  requestInit(input) { this.lastRunId = input.runId; return super.requestInit(input); }
  abortRun() {
    super.abortRun();
    return fetch(this.url + "/stop", { method: "POST", headers: { ...this.headers, "Content-Type": "application/json" },
      body: JSON.stringify({ threadId: this.threadId, runId: this.lastRunId }) });
  }
}

async function abortAfterFirstText(agent, runId) {
  let stopped;
  const done = agent.runAgent({ runId }, {
    onEvent: ({ event }) => {
      if (event.type === "TEXT_MESSAGE_CONTENT" && stopped === undefined) { stopped = agent.abortRun(); }
    },
  }).then(() => "resolved", (error) => "rejected: " + (error && error.name));
  const outcome = await done;
  const stop = await stopped;
  return { outcome, stopStatus: stop && stop.status };
}

async function nextTurn(agent, text) {
  agent.addMessage({ id: "m-" + Math.random().toString(16).slice(2), role: "user", content: text });
  const seen = [];
  await agent.runAgent({}, { onEvent: ({ event }) => { seen.push(event.type); } });
  return seen;
}

async function main() {
  const [url, apiKey] = process.argv.slice(2);
  const headers = apiKey ? { "x-api-key": apiKey } : {};
  const report = {};

  const plain = new HttpAgent({ url, headers, threadId: "node-stop-plain" });
  plain.addMessage({ id: "p-1", role: "user", content: "slow" });
  report.plain = await abortAfterFirstText(plain, "node-run-plain");
  report.plain.next = await nextTurn(plain, "hello after the stop");

  const stopping = new StoppingHttpAgent({ url, headers, threadId: "node-stop-route" });
  stopping.addMessage({ id: "s-1", role: "user", content: "slow" });
  report.stopping = await abortAfterFirstText(stopping, "node-run-stopping");
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((error) => {
  process.stderr.write("stop check failed: " + (error && error.stack ? error.stack : String(error)) + "\n");
  process.exit(1);
});
