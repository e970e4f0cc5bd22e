// Side panels: session ids, usage totals, pipeline steps and candidates, mirrored state, event log.

import { el, pretty, definitions } from "./dom.js";
import { applyPatch } from "./patch.js";
import { t, tr } from "./i18n.js";

const PIPELINE_EVENT = "iac-code.pipeline.v1";
const LOG_LIMIT = 400;

export class SessionPanel {
  constructor(root) {
    this.root = root;
    this.value = {};
  }

  update(value) {
    this.value = { ...value };
    this.root.replaceChildren(definitions([[t("thread"), value.threadId], [t("run"), value.aguiRunId],
      [t("execution"), value.executionId], [t("task"), value.taskId], [t("context"), value.contextId],
      [t("session"), value.sessionId], [t("invocation"), value.rosInvocationId]]));
  }

  relabel() {
    if (Object.keys(this.value).length) this.update(this.value);
    else this.clear();
  }

  clear() {
    this.value = {};
    this.root.replaceChildren(el("p", { text: t("No run yet.") }));
  }
}

export class UsagePanel {
  constructor(root) {
    this.root = root;
    this.clear();
  }

  clear() {
    this.totals = { inputTokens: 0, outputTokens: 0, totalTokens: 0, cachedInputTokens: 0 };
    this.render();
  }

  add(usage) {
    for (const item of Array.isArray(usage) ? usage : []) {
      for (const key of Object.keys(this.totals)) {
        if (typeof item[key] === "number") this.totals[key] += item[key];
      }
    }
    this.render();
  }

  relabel() {
    this.render();
  }

  render() {
    const n = this.totals;
    this.root.replaceChildren(definitions([[t("input tokens"), n.inputTokens], [t("output tokens"), n.outputTokens],
      [t("cached input"), n.cachedInputTokens], [t("total tokens"), n.totalTokens]]));
  }
}

export class PipelinePanel {
  constructor(root) {
    this.root = root;
    this.clear();
  }

  clear() {
    this.steps = new Map();
    this.candidates = new Map();
    this.display = null;
    this.activities = new Map();
    this.history = [];
    this.render();
  }

  step(name, status) {
    this.steps.set(name, status);
    this.render();
  }

  // Pipeline CUSTOM events: candidates and a short history; false for any other custom event.
  custom(event) {
    if (event.name !== PIPELINE_EVENT) return false;
    const value = event.value || {};
    const candidate = value.candidate || (value.data && value.data.candidate);
    if (candidate && candidate.id) {
      const known = this.candidates.get(candidate.id) || {};
      const status = value.eventType.startsWith("candidate_") ? value.eventType.slice("candidate_".length) : known.status;
      this.candidates.set(candidate.id, { ...known, ...candidate, status });
    }
    this.history.push(value.eventType + (value.status ? ` (${value.status})` : ""));
    this.render();
    return true;
  }

  activity(event) {
    this.activities.set(event.messageId, event.content);
    const snapshot = event.content && event.content.snapshot;
    if (snapshot && snapshot.display) this.display = snapshot.display;
    this.render();
  }

  activityDelta(event, warn) {
    try {
      this.activity({ ...event, content: applyPatch(this.activities.get(event.messageId) || {}, event.patch) });
    } catch (error) {
      warn(tr("activity patch rejected ({reason}); keeping the last good snapshot", { reason: error.message }));
    }
  }

  relabel() {
    this.render();
  }

  render() {
    const display = this.display || {};
    const steps = new Map(this.steps);
    for (const step of display.steps || []) {
      if (!steps.has(step.id)) steps.set(step.id, step.status);
    }
    if (steps.size === 0 && this.candidates.size === 0 && this.history.length === 0) {
      this.root.replaceChildren(el("p", { text: t("No pipeline in this thread.") }));
      return;
    }
    const stepItems = [...steps].map(([name, status]) => el("li", { class: `step step-${status}` },
      el("span", { class: "mark", "aria-hidden": "true", text: status === "done" || status === "completed" ? "✓" : "…" }),
      ` ${name} — ${status}`));
    const candidates = new Map(this.candidates);
    for (const c of display.candidates || []) candidates.set(c.id, { ...c, ...(candidates.get(c.id) || {}) });
    const candidateItems = [...candidates.values()].map((c) => el("li", {},
      `${c.name || c.label || c.id} — ${c.status || t("known")}`,
      c.totalMonthlyCost !== undefined ? ` · ${t("{cost}/month", { cost: c.totalMonthlyCost })}` : "",
      display.selectedCandidate === c.id ? ` · ${t("selected")}` : ""));
    this.root.replaceChildren(
      definitions([[t("status"), display.status], [t("current step"), display.currentStep]]),
      el("h3", { text: t("Steps") }), el("ol", { class: "steps" }, stepItems),
      candidateItems.length ? el("h3", { text: t("Candidates") }) : "",
      candidateItems.length ? el("ul", { class: "candidates" }, candidateItems) : "",
      this.history.length ? el("details", {}, el("summary", { text: t("Pipeline events ({count})", { count: this.history.length }) }),
        el("ol", {}, this.history.map((h) => el("li", { text: h })))) : "");
  }
}

export class StatePanel {
  constructor(root) {
    this.root = root;
    this.clear();
  }

  clear() {
    this.state = undefined;
    this.root.textContent = t("No state received.");
  }

  relabel() {
    if (this.state === undefined) this.clear();
  }

  snapshot(value) {
    this.state = value;
    this.root.textContent = pretty(value);
  }

  // RFC 6902; a delta without a baseline or with a bad path is reported and the last good state kept.
  delta(ops, warn) {
    if (this.state === undefined) {
      warn(tr("STATE_DELTA before any STATE_SNAPSHOT; ignored until a snapshot arrives"));
      return;
    }
    try {
      this.snapshot(applyPatch(this.state, ops));
    } catch (error) {
      warn(tr("state patch rejected ({reason}); keeping the last good state", { reason: error.message }));
    }
  }
}

export class EventLog {
  constructor(root) {
    this.root = root;
  }

  clear() {
    this.root.replaceChildren();
  }

  add(event, id) {
    const line = el("li", {}, el("code", { text: id === null || id === undefined ? "-" : id }), ` ${event.type}`,
      event.type === "CUSTOM" ? ` ${event.name}` : "");
    this.root.append(line);
    while (this.root.childElementCount > LOG_LIMIT) this.root.firstElementChild.remove();
  }
}
