// Unit tests of the console's request shapes (stream.js), label lookup (i18n.js) and pending questions (history.js)
// under node --test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { attachBody, runRequests, RUN_PATH, STOP_PATH } from "../../iaccode_agui/static/stream.js";
import { resolveLanguage, t } from "../../iaccode_agui/static/i18n.js";

const body = { threadId: "th-1", runId: "run-1", state: {}, tools: [], context: [],
  messages: [{ id: "m", role: "user", content: "hi" }], forwardedProps: { iacCode: { cwd: "/w" } } };

test("a run starts with its RunAgentInput and re-attaches with the AgentCore attach form", () => {
  const requests = runRequests(body);
  assert.deepEqual(requests(null, true), { path: RUN_PATH, body });
  assert.deepEqual(requests(7, false).body, attachBody(body, 7));
  assert.deepEqual(requests(7, false).body, { threadId: "th-1", runId: "run-1", messages: [], state: {}, tools: [],
    context: [], forwardedProps: { agentcore: { attach: { afterSequence: 7 } } } });
  // broken before the first event (or a reload): after 0, the only id an attach cannot name is RUN_STARTED's
  assert.equal(requests(null, false).body.forwardedProps.agentcore.attach.afterSequence, 0);
  assert.equal(RUN_PATH, "ag-ui/agent");
  assert.equal(STOP_PATH, "ag-ui/agent/stop");
});

test("the conversation is read from the AgentCore history route, the thread id percent-encoded", () => {
  assert.equal(historyPath("th/1 x"), "ag-ui/agent/threads/th%2F1%20x/messages");
});

test("labels: English by default, placeholders filled, unknown languages fall back", () => {
  assert.equal(t("Run {run} started", { run: "r1" }), "Run r1 started");
  assert.equal(t("{missing} stays"), "{missing} stays");
  assert.equal(resolveLanguage("fr", []), "fr");
  assert.equal(resolveLanguage("", ["pt-BR", "en"]), "pt");
  assert.equal(resolveLanguage("", ["ko-KR"]), "en");
});

import { historyPath, pendingAfter, pendingIn } from "../../iaccode_agui/static/history.js";

test("pending questions after a run: named by its end, kept by a refusal, ended by the errors that end them", () => {
  const asked = [{ id: "permission-1" }];
  const finished = (outcome) => ({ terminal: { type: "RUN_FINISHED", outcome } });
  const failed = (code) => ({ terminal: { type: "RUN_ERROR", code } });
  assert.deepEqual(pendingAfter([], finished({ type: "interrupt", interrupts: asked }), false), asked);
  assert.deepEqual(pendingAfter(asked, finished({ type: "success" }), true), []);
  assert.deepEqual(pendingAfter(asked, finished(undefined), true), []);
  // a request refused before it ran (e.g. 409 RESUME_REQUIRED for a message, 422 for a bad answer) changes nothing
  assert.deepEqual(pendingAfter(asked, { error: { code: "RESUME_REQUIRED", status: 409 } }, false), asked);
  assert.deepEqual(pendingAfter(asked, { error: { code: "RESUME_PAYLOAD_INVALID", status: 422 } }, true), asked);
  assert.deepEqual(pendingAfter(asked, { error: { code: "EXECUTION_LOST", status: 409 } }, true), []);
  // a resume that failed leaves the questions open unless its error ends them; a stop ends them
  assert.deepEqual(pendingAfter(asked, failed("A2A_UNAVAILABLE"), true), asked);
  assert.deepEqual(pendingAfter(asked, failed("RUN_CANCELLED"), true), []);
  assert.deepEqual(pendingAfter(asked, failed("A2A_UNAVAILABLE"), false), []);
});

test("pending questions in a stored conversation: the unanswered interrupts after its last user message", () => {
  const user = (id) => ({ id, role: "user", content: id });
  const asked = (id, answer) => ({ id: `interrupt-${id}`, role: "activity", activityType: "iac-code.interrupt.v1",
    content: answer ? { interrupt: { id }, answer } : { interrupt: { id } } });
  const pipeline = { id: "p", role: "activity", activityType: "iac-code.pipeline.v1", content: {} };
  const call = { id: "a", role: "assistant", toolCalls: [{ id: "c", type: "function", function: { name: "w", arguments: "{}" } }] };
  assert.deepEqual(pendingIn([]), []);
  assert.deepEqual(pendingIn([user("u1"), call, asked("i1"), pipeline, asked("i2")]), [{ id: "i1" }, { id: "i2" }]);
  assert.deepEqual(pendingIn([user("u1"), call, asked("i1", { status: "resolved", payload: {} })]), []);
  // a later turn supersedes the questions before it (they had expired)
  assert.deepEqual(pendingIn([user("u1"), call, asked("i1"), user("u2")]), []);
});
