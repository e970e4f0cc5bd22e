// Tiny DOM helpers: every node is built with createElement/textContent, never parsed from markup, so text from
// the stream can never become markup.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (error) {
    return String(value);
  }
}

// A <dl> of label/value pairs, skipping empty values; a label or value is a text or the attributes of one
// (i18n.js tr, so that it follows a language switch).
export function definitions(pairs) {
  const list = el("dl");
  const attrs = (item) => (item && item["data-i18n-key"] !== undefined ? item : { text: String(item) });
  for (const [label, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    list.append(el("dt", attrs(label)), el("dd", attrs(value)));
  }
  return list;
}

export function $(id) {
  return document.getElementById(id);
}
