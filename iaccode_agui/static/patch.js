// RFC 6902 JSON Patch applied defensively to the state mirrored from STATE_SNAPSHOT.
//
// A patch is atomic: it is applied to a copy and the copy is returned only when every operation
// succeeded. A bad path, a failed `test` or a malformed operation raises PatchError naming the
// operation, so the page can report it and keep the last good state instead of crashing.

export class PatchError extends Error {
  constructor(index, op, reason) {
    super(`operation ${index} (${op && op.op} ${op && op.path}): ${reason}`);
    this.name = "PatchError";
    this.index = index;
  }
}

// "/a/b~1c/0" -> ["a", "b/c", "0"] (RFC 6901: ~1 is "/", ~0 is "~").
export function parsePointer(pointer) {
  if (typeof pointer !== "string") throw new Error("the path is not a string");
  if (pointer === "") return [];
  if (!pointer.startsWith("/")) throw new Error("the path must start with '/'");
  return pointer.slice(1).split("/").map((token) => {
    if (/~[^01]|~$/.test(token)) throw new Error(`bad escape in '${token}'`);
    return token.replace(/~1/g, "/").replace(/~0/g, "~");
  });
}

const clone = (value) => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));

function isContainer(node) {
  return node !== null && typeof node === "object";
}

function arrayIndex(array, token, forAdd) {
  if (forAdd && token === "-") return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new Error(`'${token}' is not an array index`);
  const index = Number(token);
  const limit = forAdd ? array.length : array.length - 1;
  if (index > limit) throw new Error(`index ${index} is out of range`);
  return index;
}

function hasOwn(node, key) {
  return Object.prototype.hasOwnProperty.call(node, key);
}

// The container holding the last token, walking only through values that exist.
function parentOf(doc, tokens) {
  let node = doc;
  for (let i = 0; i < tokens.length - 1; i += 1) {
    const token = tokens[i];
    if (Array.isArray(node)) node = node[arrayIndex(node, token, false)];
    else if (isContainer(node) && hasOwn(node, token)) node = node[token];
    else throw new Error(`'/${tokens.slice(0, i + 1).join("/")}' does not exist`);
  }
  if (!isContainer(node)) throw new Error("the parent is not an object or array");
  return node;
}

function getValue(doc, tokens) {
  if (tokens.length === 0) return doc;
  const parent = parentOf(doc, tokens);
  const key = tokens[tokens.length - 1];
  if (Array.isArray(parent)) return parent[arrayIndex(parent, key, false)];
  if (!hasOwn(parent, key)) throw new Error(`'${key}' does not exist`);
  return parent[key];
}

// Each mutator returns the (possibly new) document root.
function addValue(doc, tokens, value) {
  if (tokens.length === 0) return value;
  const parent = parentOf(doc, tokens);
  const key = tokens[tokens.length - 1];
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, key, true), 0, value);
  else parent[key] = value;
  return doc;
}

function removeValue(doc, tokens) {
  if (tokens.length === 0) throw new Error("cannot remove the whole document");
  const parent = parentOf(doc, tokens);
  const key = tokens[tokens.length - 1];
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, key, false), 1);
  else if (hasOwn(parent, key)) delete parent[key];
  else throw new Error(`'${key}' does not exist`);
  return doc;
}

function replaceValue(doc, tokens, value) {
  if (tokens.length === 0) return value;
  getValue(doc, tokens); // must exist
  const parent = parentOf(doc, tokens);
  const key = tokens[tokens.length - 1];
  if (Array.isArray(parent)) parent[arrayIndex(parent, key, false)] = value;
  else parent[key] = value;
  return doc;
}

export function deepEqual(a, b) {
  if (a === b) return true;
  if (!isContainer(a) || !isContainer(b) || Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((key) => hasOwn(b, key) && deepEqual(a[key], b[key]));
}

function applyOne(doc, op) {
  if (!isContainer(op) || typeof op.op !== "string") throw new Error("not an operation object");
  const tokens = parsePointer(op.path);
  const needsValue = op.op === "add" || op.op === "replace" || op.op === "test";
  if (needsValue && !hasOwn(op, "value")) throw new Error("'value' is missing");
  switch (op.op) {
    case "add": return addValue(doc, tokens, clone(op.value));
    case "remove": return removeValue(doc, tokens);
    case "replace": return replaceValue(doc, tokens, clone(op.value));
    case "move": {
      const from = parsePointer(op.from);
      if (op.path.startsWith(`${op.from}/`)) throw new Error("cannot move a value into itself");
      const value = getValue(doc, from);
      return addValue(removeValue(doc, from), tokens, value);
    }
    case "copy": return addValue(doc, tokens, clone(getValue(doc, parsePointer(op.from))));
    case "test":
      if (!deepEqual(getValue(doc, tokens), op.value)) throw new Error("test failed");
      return doc;
    default: throw new Error(`unknown op '${op.op}'`);
  }
}

// Apply `ops` to `doc`; returns the new document, never touching `doc` itself.
export function applyPatch(doc, ops) {
  if (!Array.isArray(ops)) throw new PatchError(0, null, "the delta is not an array");
  let result = clone(doc);
  ops.forEach((op, index) => {
    try {
      result = applyOne(result, op);
    } catch (error) {
      throw new PatchError(index, op, error.message);
    }
  });
  return result;
}
