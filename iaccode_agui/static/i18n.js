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

// Relabel the page's static elements: data-i18n (text), data-i18n-placeholder, data-i18n-title. The
// English originals are kept on the element so the page can switch languages any number of times.
export function translatePage(root = document) {
  for (const node of root.querySelectorAll("[data-i18n]")) {
    if (node.dataset.i18nKey === undefined) node.dataset.i18nKey = node.textContent.trim();
    node.textContent = t(node.dataset.i18nKey);
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
