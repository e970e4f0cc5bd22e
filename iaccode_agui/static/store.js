// What the page remembers: threads in localStorage (they outlive the tab), the token and the run in
// flight in sessionStorage (the token never outlives the tab and never appears in a URL).

const THREADS = "iaccode_agui.threads.v1";
const TOKEN = "iaccode_agui.token";
const ACTIVE = "iaccode_agui.activeRun";
const PREFS = "iaccode_agui.prefs.v1";
const MAX_THREADS = 50;

function read(storage, key, fallback) {
  try {
    const raw = storage.getItem(key);
    return raw === null ? fallback : JSON.parse(raw);
  } catch (error) {
    return fallback;
  }
}

function write(storage, key, value) {
  try {
    if (value === null || value === undefined) storage.removeItem(key);
    else storage.setItem(key, JSON.stringify(value));
  } catch (error) {
    // storage full or disabled: the page keeps working, it just forgets
  }
}

export const threads = {
  list() {
    const all = read(localStorage, THREADS, []);
    return Array.isArray(all) ? all.sort((a, b) => (b.updated || 0) - (a.updated || 0)) : [];
  },
  get(threadId) {
    return this.list().find((t) => t.threadId === threadId) || null;
  },
  save(thread) {
    const rest = this.list().filter((t) => t.threadId !== thread.threadId);
    write(localStorage, THREADS, [{ ...thread, updated: Date.now() }, ...rest].slice(0, MAX_THREADS));
  },
  remove(threadId) {
    write(localStorage, THREADS, this.list().filter((t) => t.threadId !== threadId));
  },
};

export const token = {
  get: () => read(sessionStorage, TOKEN, ""),
  set: (value) => write(sessionStorage, TOKEN, value || null),
};

export const activeRun = {
  get: () => read(sessionStorage, ACTIVE, null),
  set: (value) => write(sessionStorage, ACTIVE, value),
};

export const prefs = {
  get: () => read(localStorage, PREFS, {}),
  set: (value) => write(localStorage, PREFS, value),
};
