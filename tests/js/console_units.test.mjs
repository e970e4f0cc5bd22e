// Unit tests of the console's SSE parser and JSON-Patch applier (node --test; run by tests/processes/test_console_http.py).
import { test } from "node:test";
import assert from "node:assert/strict";
import { SSEParser, parseFrame } from "../../iaccode_agui/static/sse.js";
import { applyPatch, PatchError, parsePointer } from "../../iaccode_agui/static/patch.js";

const enc = new TextEncoder();

test("frames split on blank lines, the incomplete tail is kept for the next chunk", () => {
  const parser = new SSEParser();
  assert.deepEqual(parser.push('id: 0\ndata: {"type":"RUN_STARTED"}\n\nid: 1\ndata: {"ty'), [
    { id: "0", event: "message", data: '{"type":"RUN_STARTED"}', comment: false },
  ]);
  assert.equal(parser.pending, true);
  const rest = parser.push('pe":"X"}\n\n');
  assert.deepEqual(rest.map((f) => JSON.parse(f.data).type), ["X"]);
  assert.equal(parser.lastEventId, "1");
  assert.equal(parser.pending, false);
});

test("a multi-byte character split across chunks is decoded once whole", () => {
  const parser = new SSEParser();
  const bytes = enc.encode('id: 7\ndata: {"d":"héllo 你好"}\n\n');
  const cut = bytes.indexOf(0xe4) + 1; // inside the first CJK character
  assert.deepEqual(parser.push(bytes.slice(0, cut)), []);
  const [frame] = parser.push(bytes.slice(cut));
  assert.equal(JSON.parse(frame.data).d, "héllo 你好");
  assert.equal(parser.lastEventId, "7");
});

test("CRLF line ends, comments, multi-line data and ids without data", () => {
  const parser = new SSEParser();
  const frames = parser.push(": heartbeat\r\n\r\nid: 3\r\ndata: a\r\ndata: b\r\n\r\nid: 4\r\n\r\n");
  assert.deepEqual(frames, [
    { id: null, event: "message", data: null, comment: true },
    { id: "3", event: "message", data: "a\nb", comment: false },
    { id: "4", event: "message", data: null, comment: false },
  ]);
  assert.equal(parser.lastEventId, "4");
  assert.equal(parseFrame(""), null);
  assert.equal(parseFrame("data:x").data, "x");
});

test("a heartbeat keeps the last id", () => {
  const parser = new SSEParser();
  parser.push("id: 9\ndata: {}\n\n: heartbeat\n\n");
  assert.equal(parser.lastEventId, "9");
});

test("RFC 6902 operations: add, remove, replace, move, copy, test", () => {
  const doc = { todos: ["parse input"], done: 0, "a/b": { "m~n": 1 } };
  const out = applyPatch(doc, [
    { op: "add", path: "/todos/-", value: "call tool" },
    { op: "replace", path: "/done", value: 1 },
    { op: "add", path: "/todos/0", value: "first" },
    { op: "remove", path: "/todos/0" },
    { op: "copy", from: "/done", path: "/copied" },
    { op: "move", from: "/a~1b/m~0n", path: "/moved" },
    { op: "test", path: "/todos", value: ["parse input", "call tool"] },
  ]);
  assert.deepEqual(out, { todos: ["parse input", "call tool"], done: 1, "a/b": {}, copied: 1, moved: 1 });
  assert.deepEqual(doc, { todos: ["parse input"], done: 0, "a/b": { "m~n": 1 } }, "the input is untouched");
  assert.deepEqual(applyPatch({ x: 1 }, [{ op: "replace", path: "", value: [1] }]), [1]);
});

test("a bad path is reported, not a crash, and the patch is all or nothing", () => {
  const doc = { done: 0 };
  for (const [ops, fragment] of [
    [[{ op: "replace", path: "/missing/deep", value: 1 }], "'/missing' does not exist"],
    [[{ op: "add", path: "/done", value: 2 }, { op: "remove", path: "/nope" }], "operation 1"],
    [[{ op: "test", path: "/done", value: 1 }], "test failed"],
    [[{ op: "add", path: "no-slash", value: 1 }], "must start with '/'"],
    [[{ op: "explode", path: "/done" }], "unknown op"],
    [[{ op: "add", path: "/done" }], "'value' is missing"],
    [[{ op: "add", path: "/list/5", value: 1 }], "does not exist"],
    [{ op: "add" }, "not an array"],
  ]) {
    assert.throws(() => applyPatch(doc, ops), (error) => error instanceof PatchError && error.message.includes(fragment),
      fragment);
  }
  assert.throws(() => applyPatch({ l: [1] }, [{ op: "add", path: "/l/2", value: 1 }]), /out of range/);
  assert.throws(() => applyPatch({ l: [1] }, [{ op: "add", path: "/l/01", value: 1 }]), /not an array index/);
  assert.deepEqual(doc, { done: 0 });
  assert.throws(() => parsePointer("/a~2"), /bad escape/);
});

import { choicesFor } from "../../iaccode_agui/static/forms.js";

const pick = (id, title) => ({ type: "object", properties: { selectedId: { type: "string", const: id, title } },
  required: ["selectedId"], additionalProperties: false });

test("permission: one choice per enum value, labelled from the options", () => {
  const schema = { type: "object", properties: { decision: { type: "string", enum: ["allow_once", "deny"] } },
    required: ["decision"], additionalProperties: false };
  const choices = choicesFor(schema, { options: [{ id: "allow_once", label: "Allow once" }, { id: "deny", label: "Deny" }] });
  assert.deepEqual(choices.map((c) => [c.label, c.fixed, c.fields]), [
    ["Allow once", { decision: "allow_once" }, []], ["Deny", { decision: "deny" }, []]]);
});

test("question: constants plus a free-text alternative", () => {
  const schema = { oneOf: [pick("cn-hangzhou", "Hangzhou"), pick("cn-beijing", "Beijing"), { type: "object",
    properties: { freeText: { type: "string", minLength: 1 } }, required: ["freeText"] }] };
  const choices = choicesFor(schema, {});
  assert.deepEqual(choices.map((c) => c.label), ["Hangzhou", "Beijing", "Another answer (free text)"]);
  assert.deepEqual(choices[2].fields.map((f) => [f.name, f.required]), [["freeText", true]]);
});

test("confirmation: the action spelling of the same answers is not offered twice; overrides stay", () => {
  const withOverrides = (s) => ({ ...s, properties: { ...s.properties, parameter_overrides: { type: "object" } } });
  const schema = { oneOf: [withOverrides(pick("confirm", "Deploy now")), withOverrides(pick("cancel", "Cancel")),
    { type: "object", properties: { action: { type: "string", enum: ["confirm", "cancel"] },
      parameter_overrides: { type: "object" } }, required: ["action"] }] };
  const choices = choicesFor(schema, {});
  assert.deepEqual(choices.map((c) => c.label), ["Deploy now", "Cancel"]);
  assert.deepEqual(choices[0].fields.map((f) => [f.name, f.required]), [["parameter_overrides", false]]);
});

test("a schema the forms do not understand falls back to the JSON editor", () => {
  assert.equal(choicesFor({ type: "array" }, {}), null);
  assert.equal(choicesFor(undefined, {}), null);
  assert.deepEqual(choicesFor({ type: "object", properties: { note: { type: "string" } } }, {})[0].fields
    .map((f) => f.name), ["note"]);
});
