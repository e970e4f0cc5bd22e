// The message list the official @ag-ui/client HttpAgent rebuilds from our streams (its own reducer and verifier).
// Usage: node messages_check.cjs '<json>' with {url, headers, forwardedProps, pipelineProps, thread}; prints one
// JSON line: for each flow, the agent's messages as {id, role, content, toolCalls: [ids], toolCallId}.
"use strict";
const { HttpAgent } = require("@ag-ui/client");

function plain(messages) {
  return messages.map((m) => {
    const out = { id: m.id, role: m.role, content: typeof m.content === "string" ? m.content : "" };
    if (m.toolCalls) out.toolCalls = m.toolCalls.map((call) => call.id);
    if (m.toolCallId) out.toolCallId = m.toolCallId;
    return out;
  });
}

// Runs `text` on a fresh thread, then answers each interrupt with `answer(interrupt)` until none is left or
// `answers` runs were made.
async function flow(config, name, text, forwardedProps, answer, answers) {
  const agent = new HttpAgent({ url: config.url, headers: config.headers, threadId: config.thread + "-" + name });
  agent.addMessage({ id: name + "-u1", role: "user", content: text });
  let params = { forwardedProps };
  for (let run = 0; ; run += 1) {
    await agent.runAgent(params);     // rejects if the client's verifier refuses the stream
    const pending = agent.pendingInterrupts || [];
    if (!pending.length || run >= answers) break;
    params = { forwardedProps, resume: pending.map((i) => ({ interruptId: i.id, status: "resolved",
                                                             payload: answer(i) })) };
  }
  return plain(agent.messages);
}

async function main() {
  const config = JSON.parse(process.argv[2]);
  const report = {
    tool: await flow(config, "tool", "tool", config.forwardedProps, null, 0),
    write: await flow(config, "write", "please write a file", config.forwardedProps,
                      () => ({ decision: "allow_once" }), 1),
    pipeline: await flow(config, "pipeline", "pipeline: deploy my web shop", config.pipelineProps,
                         () => ({ selectedId: "cn-hangzhou" }), 1),
  };
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((error) => {
  process.stderr.write("HttpAgent failed: " + (error && error.stack ? error.stack : String(error)) + "\n");
  process.exit(1);
});
