// The transcript: assistant text assembled per messageId, reasoning, tool cards, artifacts, errors.
// Every state is spelled out in words (not only colour) so the page reads the same in any palette, and every
// label is set with tr() so that a language switch relabels the whole transcript.

import { el, pretty, definitions } from "./dom.js";
import { setLabel, tr } from "./i18n.js";
import { answerWords } from "./forms.js";
import { INTERRUPT_ACTIVITY } from "./history.js";

const SESSION_EVENT = "iac-code.session.v1";
const ARTIFACT_EVENT = "iac-code.artifact.v1";
const TOOL_PROGRESS_EVENT = "iac-code.tool-progress.v1";
// The AgentCore route repeats RUN_FINISHED.usage in this event right before it: the usage panel counts the
// RUN_FINISHED figures, so this one is only listed in the event log.
const USAGE_EVENT = "agentcore.usage";
// A run stopped on request ends with one of these: it reads as stopped, not as a failure.
export const STOPPED = new Set(["RUN_CANCELLED", "CANCELLED"]);
const interruptMessageId = (interrupt) => `interrupt-${interrupt.id}`;   // the id the stored conversation gives it

// A stored user message's text: its parts joined (an image is stored as a text part that names it).
function textOf(content) {
  if (typeof content === "string") return content;
  return (Array.isArray(content) ? content : []).map((part) => part.text ?? `[${part.type}]`).join("\n");
}

// A tool input the runtime withholds arrives as {"summary": {"fields": ...}}: its field names, or null.
function withheld(raw) {
  try {
    const input = JSON.parse(raw);
    const summary = input && Object.keys(input).length === 1 && input.summary;
    return summary && typeof summary === "object" ? Object.keys(summary.fields || {}) : null;
  } catch (error) {
    return null;
  }
}

export class Transcript {
  constructor(root, panels) {
    this.root = root;
    this.panels = panels;
    this.messages = new Map();   // messageId -> {segment, text} of the current run
    this.reasoning = new Map();  // messageId -> <p> of the reasoning block
    this.tools = new Map();      // toolCallId -> card parts (kept across the runs of a thread)
    this.known = new Set();      // ids of the messages shown (the stream's ids, which the server stores)
    this.handlers = {
      RUN_STARTED: (e) => this.runStarted(e),
      TEXT_MESSAGE_START: (e) => this.textSegment(e.messageId, e.role),
      TEXT_MESSAGE_CONTENT: (e) => this.textDelta(e.messageId, e.delta),
      TEXT_MESSAGE_CHUNK: (e) => this.textDelta(e.messageId, e.delta),
      TEXT_MESSAGE_END: (e) => this.textEnd(e.messageId),
      REASONING_START: () => {},
      REASONING_MESSAGE_START: (e) => this.reasoningBlock(e.messageId),
      REASONING_MESSAGE_CONTENT: (e) => this.reasoningDelta(e.messageId, e.delta),
      REASONING_MESSAGE_END: () => {},
      REASONING_END: () => {},
      TOOL_CALL_START: (e) => this.toolStart(e.toolCallId, e.toolCallName),
      TOOL_CALL_ARGS: (e) => this.toolArgs(e.toolCallId, e.delta),
      TOOL_CALL_END: (e) => this.toolEnd(e.toolCallId),
      TOOL_CALL_RESULT: (e) => this.toolResult(e.toolCallId, e.content, e.messageId),
      CUSTOM: (e) => this.custom(e),
      STEP_STARTED: (e) => panels.pipeline.step(e.stepName, "running"),
      STEP_FINISHED: (e) => panels.pipeline.step(e.stepName, "done"),
      ACTIVITY_SNAPSHOT: (e) => panels.pipeline.activity(e),
      ACTIVITY_DELTA: (e) => panels.pipeline.activityDelta(e, (text) => this.notice(text, "warning")),
      STATE_SNAPSHOT: (e) => panels.state.snapshot(e.snapshot),
      STATE_DELTA: (e) => panels.state.delta(e.delta, (text) => this.notice(text, "warning")),
      MESSAGES_SNAPSHOT: (e) => this.show(e.messages),
      RUN_FINISHED: (e) => this.runFinished(e),
      RUN_ERROR: (e) => this.runError(e),
    };
  }

  clear() {
    this.root.replaceChildren();
    this.messages.clear();
    this.reasoning.clear();
    this.tools.clear();
    this.known.clear();
  }

  append(node) {
    this.root.append(node);
    node.scrollIntoView({ block: "nearest" });
    return node;
  }

  event(event) {
    const handler = this.handlers[event && event.type];
    if (handler) handler(event);
    else this.notice(tr("event {type}", { type: event && event.type }), "info");
  }

  userMessage(text, messageId = null) {
    if (messageId) this.known.add(messageId);
    this.append(el("div", { class: "msg user", "data-message-id": messageId }, el("span", { class: "who", ...tr("You") }),
      el("p", { text })));
  }

  // Stored messages (the thread's conversation, or a MESSAGES_SNAPSHOT), in order: the ones not shown yet,
  // as their live events show them. The ids are the ones the streams used, so a snapshot of what this page
  // followed adds nothing, and one that holds turns made elsewhere (another tab or device) adds those.
  show(messages) {
    for (const message of messages || []) {
      const known = this.known.has(message.id);
      if (message.role === "user" && !known) this.userMessage(textOf(message.content), message.id);
      else if (message.role === "assistant") this.storedAssistant(message, known);
      else if (message.role === "tool" && !known) this.toolResult(message.toolCallId, message.content, message.id);
      else if (message.role === "activity" && message.activityType === INTERRUPT_ACTIVITY) this.storedInterrupt(message, known);
      else if (message.role === "activity") this.panels.pipeline.activity({ ...message, messageId: message.id });
    }
  }

  storedAssistant(message, known) {
    if (!known && message.content) {
      this.textSegment(message.id);
      this.textDelta(message.id, message.content);
      this.textEnd(message.id);
    }
    for (const call of message.toolCalls || []) {
      if (this.tools.has(call.id)) continue;
      this.toolArgs(call.id, call.function.arguments, call.function.name);
      this.toolEnd(call.id);
    }
  }

  // An interrupt and the answer given to it (the answer reads as the user's, as when it was sent).
  storedInterrupt(message, known) {
    const { interrupt, answer } = message.content || {};
    if (known || !interrupt) return;
    this.known.add(message.id);
    this.asked(interrupt);
    if (answer) this.userMessage(answerWords(interrupt, answer));
  }

  // `content`: text as it came (e.g. from the server), or a label from tr().
  notice(content, kind = "info") {
    const label = { warning: tr("Warning"), error: tr("Error") }[kind] || tr("Note");
    return this.append(el("p", { class: `notice ${kind}` }, el("strong", label), ": ",
      typeof content === "string" ? content : el("span", content)));
  }

  runStarted(event) {
    this.messages.clear();
    this.append(el("p", { class: "run-mark", ...tr("Run {run} started", { run: event.runId }) }));
  }

  // A new segment when anything else was rendered since the last delta, so the page stays chronological.
  textSegment(messageId, role = "assistant") {
    this.known.add(messageId);
    const body = el("p", { class: "text" });
    const segment = el("div", { class: `msg ${role === "user" ? "user" : "assistant"}`, "data-message-id": messageId },
      el("span", { class: "who", ...(role === "user" ? tr("You") : tr("Assistant")) }), body);
    this.messages.set(messageId, { segment, body, ended: false });
    this.append(segment);
    return this.messages.get(messageId);
  }

  textDelta(messageId, delta) {
    let message = this.messages.get(messageId);
    if (!message || message.ended || this.root.lastElementChild !== message.segment) {
      message = this.textSegment(messageId, "assistant");
    }
    message.body.append(document.createTextNode(delta || ""));
    message.segment.scrollIntoView({ block: "nearest" });
  }

  textEnd(messageId) {
    const message = this.messages.get(messageId);
    if (message) message.ended = true;
  }

  reasoningBlock(messageId) {
    const text = el("p", { class: "text" });
    this.append(el("details", { class: "reasoning" }, el("summary", tr("Reasoning")), text));
    this.reasoning.set(messageId, text);
    return text;
  }

  reasoningDelta(messageId, delta) {
    const text = this.reasoning.get(messageId) || this.reasoningBlock(messageId);
    text.append(document.createTextNode(delta || ""));
  }

  toolCard(toolCallId, name) {
    let card = this.tools.get(toolCallId);
    if (card) return card;
    const status = el("span", { class: "status", ...tr("running") });
    const args = el("pre", { class: "args" });
    const progress = el("ul", { class: "progress" });
    const result = el("div", { class: "result" });
    const root = el("article", { class: "tool", "data-tool-call-id": toolCallId },
      el("header", {}, el("strong", tr("Tool: {name}", { name: name || "tool" })), " — ", status),
      el("details", { open: true }, el("summary", tr("Arguments")), args), progress, result);
    card = { root, status, args, progress, result, raw: "" };
    this.tools.set(toolCallId, card);
    this.append(root);
    return card;
  }

  toolStart(toolCallId, name) {
    this.toolCard(toolCallId, name);
  }

  toolArgs(toolCallId, delta, name = undefined) {
    const card = this.toolCard(toolCallId, name);
    card.raw += delta || "";
    card.args.textContent = card.raw;
  }

  toolEnd(toolCallId) {
    const card = this.toolCard(toolCallId);
    const fields = withheld(card.raw);
    try {
      if (fields) card.args.replaceChildren(el("span", tr("not shown by the runtime (fields: {fields})", { fields: fields.join(", ") })));
      else if (card.raw) card.args.textContent = pretty(JSON.parse(card.raw));
      else card.args.replaceChildren(el("span", tr("(none)")));
    } catch (error) {
      card.args.textContent = card.raw;
    }
    setLabel(card.status, tr("called, waiting for the result"));
  }

  // An interrupt of a tool whose input is withheld (ask_user_question): its card shows what the tool asks.
  asked(interrupt) {
    const card = this.tools.get(interrupt.toolCallId);
    if (!card || interrupt.reason === "tool_call" || !withheld(card.raw)) return;
    const m = interrupt.metadata || {};
    const options = (Array.isArray(m.options) ? m.options : []).map((o) => o && (o.label || o.title || o.id));
    card.args.replaceChildren(definitions([[tr("question"), m.prompt || interrupt.message],
      [tr("options"), options.filter(Boolean).join(" · ")]]));
  }

  toolResult(toolCallId, content, messageId = null) {
    if (messageId) this.known.add(messageId);
    const card = this.toolCard(toolCallId);
    setLabel(card.status, card.failed ? tr("failed") : tr("done"));
    card.result.replaceChildren(el("strong", tr("Result")), el("pre", { text: String(content ?? "") }));
  }

  toolProgress(value) {
    const card = this.toolCard(value.toolUseId, value.name);
    const detail = value.mcp || value.mcpProgress || {};
    const parts = [value.status || "progress"];
    if (detail.progress !== undefined) parts.push(detail.total ? `${detail.progress}/${detail.total}` : `${detail.progress}`);
    if (detail.message || value.message) parts.push(detail.message || value.message);
    card.progress.append(el("li", { text: parts.join(" · ") }));
    if (value.status === "failed" || value.status === "error") {
      card.failed = true;
      setLabel(card.status, tr("failed"));
    }
  }

  artifact(value) {
    const parts = (value.parts || []).map((part) => {
      const meta = part.metadata || {};
      return el("li", {}, definitions([[tr("file"), part.filename || part.name], [tr("type"), part.mediaType],
        [tr("size"), meta.byteSize !== undefined ? tr("{n} bytes", { n: meta.byteSize }) : null],
        [tr("location"), part.url || meta.uri], [tr("text"), part.text]]));
    });
    this.append(el("article", { class: "artifact" },
      el("header", {}, el("strong", tr("Artifact: {name}", { name: value.name || value.artifactId || "" }))), el("ul", {}, parts)));
  }

  custom(event) {
    const value = event.value || {};
    if (event.name === USAGE_EVENT) return;
    if (event.name === SESSION_EVENT) this.panels.session.update(value);
    else if (event.name === ARTIFACT_EVENT) this.artifact(value);
    else if (event.name === TOOL_PROGRESS_EVENT) this.toolProgress(value);
    else if (!this.panels.pipeline.custom(event)) {
      this.append(el("details", { class: "custom" }, el("summary", tr("Custom event {name}", { name: event.name })),
        el("pre", { text: pretty(value) })));
    }
  }

  runFinished(event) {
    this.panels.usage.add(event.usage);
    const outcome = (event.outcome && event.outcome.type) || "success";
    const text = outcome === "interrupt" ? tr("Run finished: waiting for your answer") : tr("Run finished: {outcome}", { outcome });
    this.append(el("p", { class: `run-mark outcome-${outcome}`, ...text }));
    for (const interrupt of outcome === "interrupt" ? event.outcome.interrupts || [] : []) {
      this.known.add(interruptMessageId(interrupt));
      this.asked(interrupt);
    }
  }

  runError(event) {
    this.panels.usage.add(event.usage);
    if (STOPPED.has(event.code)) {
      this.append(el("p", { class: "run-mark outcome-stopped", ...tr("Run stopped") }));
      return;
    }
    this.append(el("div", { class: "run-error", role: "alert" },
      el("strong", tr("Run error {code}", { code: event.code || "" })), el("p", { text: event.message || "" })));
  }
}
