// The transcript: assistant text assembled per messageId, reasoning, tool cards, artifacts, errors.
// Every state is spelled out in words (not only colour) so the page reads the same in any palette.

import { el, pretty, definitions } from "./dom.js";
import { t } from "./i18n.js";

const SESSION_EVENT = "iac-code.session.v1";
const ARTIFACT_EVENT = "iac-code.artifact.v1";
const TOOL_PROGRESS_EVENT = "iac-code.tool-progress.v1";
// The AgentCore route repeats RUN_FINISHED.usage in this event right before it: the usage panel counts the
// RUN_FINISHED figures, so this one is only listed in the event log.
const USAGE_EVENT = "agentcore.usage";

export class Transcript {
  constructor(root, panels) {
    this.root = root;
    this.panels = panels;
    this.messages = new Map();   // messageId -> {segment, text} of the current run
    this.reasoning = new Map();  // messageId -> <p> of the reasoning block
    this.tools = new Map();      // toolCallId -> card parts (kept across the runs of a thread)
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
      TOOL_CALL_RESULT: (e) => this.toolResult(e.toolCallId, e.content),
      CUSTOM: (e) => this.custom(e),
      STEP_STARTED: (e) => panels.pipeline.step(e.stepName, "running"),
      STEP_FINISHED: (e) => panels.pipeline.step(e.stepName, "done"),
      ACTIVITY_SNAPSHOT: (e) => panels.pipeline.activity(e),
      ACTIVITY_DELTA: (e) => panels.pipeline.activityDelta(e, (text) => this.notice(text, "warning")),
      STATE_SNAPSHOT: (e) => panels.state.snapshot(e.snapshot),
      STATE_DELTA: (e) => panels.state.delta(e.delta, (text) => this.notice(text, "warning")),
      MESSAGES_SNAPSHOT: (e) => this.messagesSnapshot(e.messages),
      RUN_FINISHED: (e) => this.runFinished(e),
      RUN_ERROR: (e) => this.runError(e),
    };
  }

  clear() {
    this.root.replaceChildren();
    this.messages.clear();
    this.reasoning.clear();
    this.tools.clear();
  }

  append(node) {
    this.root.append(node);
    node.scrollIntoView({ block: "nearest" });
    return node;
  }

  event(event) {
    const handler = this.handlers[event && event.type];
    if (handler) handler(event);
    else this.notice(t("event {type}", { type: event && event.type }), "info");
  }

  userMessage(text) {
    this.append(el("div", { class: "msg user" }, el("span", { class: "who", text: t("You") }), el("p", { text })));
  }

  notice(text, kind = "info") {
    const label = { info: t("Note"), warning: t("Warning"), error: t("Error") }[kind] || t("Note");
    return this.append(el("p", { class: `notice ${kind}` }, el("strong", { text: `${label}: ` }), text));
  }

  runStarted(event) {
    this.messages.clear();
    this.append(el("p", { class: "run-mark", text: t("Run {run} started", { run: event.runId }) }));
  }

  // A new segment when anything else was rendered since the last delta, so the page stays chronological.
  textSegment(messageId, role = "assistant") {
    const body = el("p", { class: "text" });
    const segment = el("div", { class: `msg ${role === "user" ? "user" : "assistant"}`, "data-message-id": messageId },
      el("span", { class: "who", text: role === "user" ? t("You") : t("Assistant") }), body);
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
    this.append(el("details", { class: "reasoning" }, el("summary", { text: t("Reasoning") }), text));
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
    const status = el("span", { class: "status", text: t("running") });
    const args = el("pre", { class: "args" });
    const progress = el("ul", { class: "progress" });
    const result = el("div", { class: "result" });
    const root = el("article", { class: "tool", "data-tool-call-id": toolCallId },
      el("header", {}, el("strong", { text: t("Tool: {name}", { name: name || "tool" }) }), " — ", status),
      el("details", { open: true }, el("summary", { text: t("Arguments") }), args), progress, result);
    card = { root, status, args, progress, result, raw: "" };
    this.tools.set(toolCallId, card);
    this.append(root);
    return card;
  }

  toolStart(toolCallId, name) {
    this.toolCard(toolCallId, name);
  }

  toolArgs(toolCallId, delta) {
    const card = this.toolCard(toolCallId);
    card.raw += delta || "";
    card.args.textContent = card.raw;
  }

  toolEnd(toolCallId) {
    const card = this.toolCard(toolCallId);
    try {
      card.args.textContent = card.raw ? pretty(JSON.parse(card.raw)) : t("(none)");
    } catch (error) {
      card.args.textContent = card.raw;
    }
    card.status.textContent = t("called, waiting for the result");
  }

  toolResult(toolCallId, content) {
    const card = this.toolCard(toolCallId);
    card.status.textContent = card.failed ? t("failed") : t("done");
    card.result.replaceChildren(el("strong", { text: t("Result") }), el("pre", { text: String(content ?? "") }));
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
      card.status.textContent = t("failed");
    }
  }

  artifact(value) {
    const parts = (value.parts || []).map((part) => {
      const meta = part.metadata || {};
      return el("li", {}, definitions([[t("file"), part.filename || part.name], [t("type"), part.mediaType],
        [t("size"), meta.byteSize !== undefined ? t("{n} bytes", { n: meta.byteSize }) : null],
        [t("location"), part.url || meta.uri], [t("text"), part.text]]));
    });
    this.append(el("article", { class: "artifact" },
      el("header", {}, el("strong", { text: t("Artifact: {name}", { name: value.name || value.artifactId || "" }) })), el("ul", {}, parts)));
  }

  custom(event) {
    const value = event.value || {};
    if (event.name === USAGE_EVENT) return;
    if (event.name === SESSION_EVENT) this.panels.session.update(value);
    else if (event.name === ARTIFACT_EVENT) this.artifact(value);
    else if (event.name === TOOL_PROGRESS_EVENT) this.toolProgress(value);
    else if (!this.panels.pipeline.custom(event)) {
      this.append(el("details", { class: "custom" }, el("summary", { text: t("Custom event {name}", { name: event.name }) }),
        el("pre", { text: pretty(value) })));
    }
  }

  messagesSnapshot(messages) {
    const items = (messages || []).map((m) => el("li", {}, el("strong", { text: `${m.role}: ` }),
      typeof m.content === "string" ? m.content : pretty(m.content)));
    this.append(el("details", { class: "custom" }, el("summary", { text: t("Messages snapshot") }), el("ol", {}, items)));
  }

  runFinished(event) {
    this.panels.usage.add(event.usage);
    const outcome = (event.outcome && event.outcome.type) || "success";
    const text = outcome === "interrupt" ? t("Run finished: waiting for your answer") : t("Run finished: {outcome}", { outcome });
    this.append(el("p", { class: `run-mark outcome-${outcome}`, text }));
  }

  runError(event) {
    this.panels.usage.add(event.usage);
    this.append(el("div", { class: "run-error", role: "alert" },
      el("strong", { text: t("Run error {code}", { code: event.code || "" }) }), el("p", { text: event.message || "" })));
  }
}
