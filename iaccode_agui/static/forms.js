// Interrupt forms generated from each interrupt's responseSchema.
//
// A schema is reduced to a list of choices (one radio each): the fixed values the choice sends (a
// `const`, or one value of a required `enum`) and the fields the user fills in (free text, parameter
// overrides as JSON, numbers, booleans). Anything else falls back to a JSON editor. The server validates
// the payload against the schema; these forms only make the valid answers easy to give.

import { el, definitions, pretty } from "./dom.js";
import { t } from "./i18n.js";

let formCounter = 0;

export class AnswerError extends Error {}

function optionLabels(metadata) {
  const labels = new Map();
  for (const list of [metadata.standardOptions, metadata.options]) {
    for (const option of Array.isArray(list) ? list : []) {
      if (option && option.id !== undefined) labels.set(String(option.id), option.label || option.title || option.id);
    }
  }
  return labels;
}

function fieldsOf(schema, skip) {
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).filter(([name]) => !skip.has(name))
    .map(([name, prop]) => ({ name, schema: prop || {}, required: required.has(name) }));
}

function alternative(schema, labels) {
  const fixed = {};
  let label = null;
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    if (prop && Object.prototype.hasOwnProperty.call(prop, "const")) {
      fixed[name] = prop.const;
      label = label || prop.title || labels.get(String(prop.const)) || String(prop.const);
    }
  }
  const fields = fieldsOf(schema, new Set(Object.keys(fixed)));
  if (!label) label = fields.length === 1 && fields[0].name === "freeText" ? t("Another answer (free text)")
    : t("Answer with {fields}", { fields: fields.map((f) => f.name).join(", ") || t("nothing") });
  return { label, fixed, fields };
}

// The choices a schema offers, or null when only the JSON editor fits.
export function choicesFor(schema, metadata = {}) {
  const labels = optionLabels(metadata);
  if (!schema || typeof schema !== "object") return null;
  const alternatives = schema.oneOf || schema.anyOf;
  if (Array.isArray(alternatives)) {
    const choices = alternatives.filter((s) => s && s.type === "object").map((s) => alternative(s, labels));
    const constants = new Set(choices.flatMap((c) => Object.values(c.fixed).map(String)));
    // An alternative spelling (e.g. {"action": enum}) of answers already offered as constants adds nothing.
    return choices.filter((c) => !(Object.keys(c.fixed).length === 0 && c.fields.length > 0 && c.fields.some(
      (f) => f.required && Array.isArray(f.schema.enum) && f.schema.enum.every((v) => constants.has(String(v))))));
  }
  if (schema.type !== "object" || !schema.properties) return null;
  const required = fieldsOf(schema, new Set()).filter((f) => f.required);
  const enumField = required.length === 1 && Array.isArray(required[0].schema.enum) ? required[0] : null;
  if (!enumField) return [{ label: t("Answer"), fixed: {}, fields: fieldsOf(schema, new Set()) }];
  const rest = fieldsOf(schema, new Set([enumField.name]));
  return enumField.schema.enum.map((value) => ({
    label: labels.get(String(value)) || String(value), fixed: { [enumField.name]: value }, fields: rest,
  }));
}

function fieldInput(field, id) {
  const type = field.schema.type;
  if (type === "boolean") return el("input", { type: "checkbox", id });
  if (type === "number" || type === "integer") return el("input", { type: "number", id, step: type === "integer" ? 1 : "any" });
  if (Array.isArray(field.schema.enum)) {
    return el("select", { id }, el("option", { value: "", text: t("(none)") }),
      field.schema.enum.map((v) => el("option", { value: String(v), text: String(v) })));
  }
  if (type === "string") return el(field.name === "freeText" ? "textarea" : "input", { id, rows: 2, type: "text" });
  return el("textarea", { id, rows: 3, placeholder: t("JSON, e.g. {}") });
}

function readField(field, input) {
  const type = field.schema.type;
  if (type === "boolean") return input.checked;
  const raw = input.value.trim();
  if (raw === "") {
    if (field.required) throw new AnswerError(t("{field} is required", { field: field.name }));
    return undefined;
  }
  if (type === "number" || type === "integer") return Number(raw);
  if (type === "string" || Array.isArray(field.schema.enum)) return type === "string" ? input.value : raw;
  try {
    return JSON.parse(raw);
  } catch (error) {
    throw new AnswerError(t("{field} is not valid JSON: {reason}", { field: field.name, reason: error.message }));
  }
}

function context(interrupt) {
  const m = interrupt.metadata || {};
  const nodes = [];
  if (m.kind === "permission" || interrupt.reason === "tool_call") {
    nodes.push(definitions([[t("tool"), m.toolName], [t("action"), m.title], [t("purpose"), m.purpose],
      [t("effect"), m.effect], [t("target"), m.target],
      [t("read only"), m.isReadOnly === undefined ? null : (m.isReadOnly ? t("yes") : t("no"))],
      [t("summary"), m.safeSummary]]));
  }
  const costly = (m.options || []).filter((o) => o && (o.summary || o.totalMonthlyCost !== undefined));
  if (costly.length) {
    nodes.push(el("ul", { class: "option-details" }, costly.map((o) => el("li", {},
      el("strong", { text: o.label || o.id }), o.summary ? ` — ${o.summary}` : "",
      o.totalMonthlyCost !== undefined ? ` (${t("{cost} per month", { cost: o.totalMonthlyCost })})` : ""))));
  }
  if (m.deploymentSummary) nodes.push(definitions(Object.entries(m.deploymentSummary)));
  return nodes;
}

// Built when a form is, so their labels follow the language picked at that moment.
const jsonAnswer = () => ({ label: t("Answer as JSON"), fixed: {}, fields: [{ name: "payload", schema: {}, required: true }] });
const decline = () => ({ label: t("Decline to answer (cancel this request)"), fixed: {}, fields: [], cancel: true });

function fieldLabel(field) {
  if (field.name === "freeText") return t("Your answer");
  return field.required ? field.name : t("{field} (optional)", { field: field.name });
}

// One interrupt's form: element, collect() (the resume entry, or AnswerError), said(entry) (that answer in
// words), tick(now) for the countdown, values()/restore() (what was entered, kept when the form is rebuilt in
// another language).
class InterruptForm {
  constructor(interrupt) {
    formCounter += 1;
    this.prefix = `int${formCounter}`;
    this.interrupt = interrupt;
    this.metadata = interrupt.metadata || {};
    this.schemaChoices = choicesFor(interrupt.responseSchema, this.metadata);
    this.choices = [...(this.schemaChoices || [jsonAnswer()]), decline()];
    this.radios = [];
    this.inputs = [];
    this.expired = false;
    this.expires = Date.parse(interrupt.expiresAt || "");
    this.countdown = el("span", { class: "countdown" });
    this.element = el("fieldset", { class: "interrupt", "data-interrupt-id": interrupt.id },
      el("legend", { text: this.question() }),
      el("p", { class: "kind", text: t("Kind: {kind}", { kind: this.metadata.kind || interrupt.reason || "input" }) },
        " · ", this.countdown),
      context(interrupt));
    this.build();
  }

  question() {
    return this.metadata.prompt || this.interrupt.message || t("The agent needs an answer");
  }

  // Fields every answer shares (e.g. parameter overrides) are shown once, after the choices.
  build() {
    const answers = this.choices.filter((c) => !c.cancel);
    const shared = answers.length > 1 ? answers[0].fields.filter(
      (f) => answers.every((c) => c.fields.some((g) => g.name === f.name))) : [];
    const sharedNames = new Set(shared.map((f) => f.name));
    this.choices.forEach((choice, index) => {
      const id = `${this.prefix}-c${index}`;
      const radio = el("input", { type: "radio", name: this.prefix, id, value: String(index) });
      this.radios.push(radio);
      const own = choice.fields.filter((f) => !sharedNames.has(f.name));
      if (choice.cancel && shared.length) {
        this.element.append(el("div", { class: "shared" }, this.fieldNodes(shared, "shared", null, `${this.prefix}-s`)));
      }
      this.element.append(el("div", { class: "choice" }, radio, el("label", { for: id, text: choice.label }),
        this.fieldNodes(own, index, radio, id)));
    });
    if (this.schemaChoices === null) {
      this.element.append(el("details", {}, el("summary", { text: t("Response schema") }),
        el("pre", { text: pretty(this.interrupt.responseSchema) })));
    }
  }

  fieldNodes(fields, choice, radio, id) {
    return fields.map((field, n) => {
      const fid = `${id}-f${n}`;
      const input = fieldInput(field, fid);
      if (radio) input.addEventListener("input", () => { radio.checked = true; });
      this.inputs.push({ choice, field, input });
      return el("div", { class: "field" }, el("label", { for: fid, text: fieldLabel(field) }), input);
    });
  }

  tick(now) {
    if (Number.isNaN(this.expires)) return;
    const left = Math.max(0, Math.round((this.expires - now) / 1000));
    this.expired = left === 0;
    this.countdown.textContent = this.expired ? t("expired")
      : t("expires in {time}", { time: `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}` });
  }

  collect() {
    const picked = this.radios.findIndex((r) => r.checked);
    if (picked < 0) throw new AnswerError(t("choose an answer for \"{question}\"", { question: this.question() }));
    const choice = this.choices[picked];
    if (choice.cancel) return { interruptId: this.interrupt.id, status: "cancelled" };
    const payload = { ...choice.fixed };
    for (const item of this.inputs.filter((i) => i.choice === picked || i.choice === "shared")) {
      const value = readField(item.field, item.input);
      if (value !== undefined) payload[item.field.name] = value;
    }
    return { interruptId: this.interrupt.id, status: "resolved",
      payload: this.schemaChoices === null ? payload.payload : payload };
  }

  // The transcript's line for the user's answer `entry` (given with `choice`): the question, then the choice
  // and what was typed.
  said(entry, choice = this.choices[this.radios.findIndex((r) => r.checked)]) {
    const typed = entry.status === "cancelled" ? [] : Object.entries(this.schemaChoices === null
      ? { payload: entry.payload } : entry.payload).filter(([name]) => !(name in choice.fixed))
      .map(([, value]) => (typeof value === "string" ? value : JSON.stringify(value)));
    const parts = Object.keys(choice.fixed).length || !typed.length ? [choice.label, ...typed] : typed;
    return `${this.question()} — ${parts.join(" · ")}`;
  }

  values() {
    return { picked: this.radios.findIndex((r) => r.checked),
      inputs: this.inputs.map(({ input }) => (input.type === "checkbox" ? input.checked : input.value)) };
  }

  restore({ picked, inputs }) {
    if (picked >= 0) this.radios[picked].checked = true;
    this.inputs.forEach(({ input }, n) => { input[input.type === "checkbox" ? "checked" : "value"] = inputs[n]; });
  }
}

export function interruptForm(interrupt) {
  return new InterruptForm(interrupt);
}

// An answer the thread's stored conversation keeps ({status, payload}), in the words said() gave it when it
// was sent: the choice is the most specific one whose fixed values the payload holds.
export function answerWords(interrupt, answer) {
  const form = new InterruptForm(interrupt);
  const payload = answer.payload && typeof answer.payload === "object" ? answer.payload : {};
  const fits = (c) => !c.cancel && Object.entries(c.fixed).every(([k, v]) => JSON.stringify(payload[k]) === JSON.stringify(v));
  const size = (c) => Object.keys(c.fixed).length;
  const choice = answer.status === "cancelled" ? form.choices[form.choices.length - 1]
    : form.choices.filter(fits).sort((a, b) => size(b) - size(a))[0] || jsonAnswer();
  return form.said({ interruptId: interrupt.id, ...answer }, choice);
}
