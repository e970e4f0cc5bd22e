// The console's own labels in the languages the server's message catalogs have. The translations are one
// static file from the same origin (i18n.json), keyed by the English text, so a label without a
// translation shows in English rather than as a key. Messages that come from the server (error messages)
// are translated by the server itself through Accept-Language.

export const LANGUAGES = ["en", "zh", "fr", "ja", "de", "es", "pt"];
let catalogs = {};
let current = "en";

export async function loadCatalogs() {
  try {
    const response = await fetch(new URL("i18n.json", import.meta.url), { cache: "no-cache" });
    if (response.ok) catalogs = await response.json();
  } catch (error) {
    catalogs = {};    // the page stays usable in English
  }
}

// The UI language for a picker value: the picked one, else the browser's first known language, else en.
export function resolveLanguage(picked, preferred = navigator.languages || [navigator.language]) {
  for (const tag of [picked, ...preferred]) {
    const base = String(tag || "").toLowerCase().split("-")[0];
    if (LANGUAGES.includes(base)) return base;
  }
  return "en";
}

export function setLanguage(language) {
  current = LANGUAGES.includes(language) ? language : "en";
  document.documentElement.lang = current;
}

// `text` (an English template with {name} placeholders) in the current language, placeholders filled.
export function t(text, params = {}) {
  const table = catalogs[current] || {};
  const template = Object.prototype.hasOwnProperty.call(table, text) ? table[text] : text;
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

// The attributes (for dom.js's el) of an element showing the label `text`: translatePage translates it again
// after a language switch, so nothing on screen stays in the previous language.
export function tr(text, params = {}) {
  return { text: t(text, params), "data-i18n": true, "data-i18n-key": text, "data-i18n-params": JSON.stringify(params) };
}

// Show the label `attrs` (from tr) on an existing element.
export function setLabel(node, attrs) {
  node.textContent = attrs.text;
  node.dataset.i18nKey = attrs["data-i18n-key"];
  node.dataset.i18nParams = attrs["data-i18n-params"];
  node.setAttribute("data-i18n", "");
}

// Relabel the page: data-i18n (text: the index.html's English text, or a label set by tr), data-i18n-placeholder,
// data-i18n-label. The English originals are kept on the element so the page can switch languages any number
// of times.
export function translatePage(root = document) {
  for (const node of root.querySelectorAll("[data-i18n]")) {
    if (node.dataset.i18nKey === undefined) node.dataset.i18nKey = node.textContent.trim();
    node.textContent = t(node.dataset.i18nKey, JSON.parse(node.dataset.i18nParams || "{}"));
  }
  for (const node of root.querySelectorAll("[data-i18n-placeholder]")) {
    if (!node.dataset.i18nPlaceholder) node.dataset.i18nPlaceholder = node.getAttribute("placeholder") || "";
    node.setAttribute("placeholder", t(node.dataset.i18nPlaceholder));
  }
  for (const node of root.querySelectorAll("[data-i18n-label]")) {
    if (!node.dataset.i18nLabel) node.dataset.i18nLabel = node.getAttribute("aria-label") || "";
    node.setAttribute("aria-label", t(node.dataset.i18nLabel));
  }
  document.title = t("iaccode_agui console");
}
