// One AG-UI run over fetch(): POST a request, read the SSE body as it streams, and re-attach after the
// last event seen when the connection breaks before the run's terminal event.
//
// The console starts runs on the AgentCore route (POST ag-ui/agent), where a closed connection does not
// stop the run, so a cut network or a page reload never cancels anything: the page re-attaches with
// forwardedProps.agentcore.attach.afterSequence = the last id it saw, and the server replays what came
// after it. Every request names its thread in X-AgentCore-Session-ID, the header a load balancer hashes
// to keep a thread on one host.
//
// The promise returned by run() always settles with exactly one of: the terminal event (RUN_FINISHED
// or RUN_ERROR), a clear HTTP/stream error, or "aborted" (the page was left) - so no caller can end up
// with a spinner that never stops.

import { SSEParser } from "./sse.js";

const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);
const REATTACH_ATTEMPTS = 6;
export const RUN_PATH = "ag-ui/agent";
export const STOP_PATH = "ag-ui/agent/stop";
export const SESSION_HEADER = "X-AgentCore-Session-ID";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The JSON error shape of the API ({"error":{"code","message"}}) or a stand-in naming the status.
export async function httpError(response) {
  let code = `HTTP_${response.status}`;
  let message = response.statusText || "request failed";
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch (ignored) {
    // not JSON: keep the status line
  }
  return new HttpError(response.status, code, message);
}

// The AgentCore attach request: the same thread and run, no messages, replay after event `after`.
export function attachBody(run, after) {
  return { threadId: run.threadId, runId: run.runId, messages: [], state: {}, tools: [], context: [],
    forwardedProps: { agentcore: { attach: { afterSequence: after } } } };
}

// Requests of a run started by the page: the RunAgentInput first, then attaches. Ids start at 0 and an
// attach replays the events after a given id, so a stream broken before its first event resumes after 0
// (only RUN_STARTED, which carries nothing to show, is not replayed).
export function runRequests(body) {
  return (after, fresh) => ({ path: RUN_PATH, body: fresh ? body : attachBody(body, after ?? 0) });
}

export class RunConnection {
  // api: the adapter's root URL; threadId: the run's thread; requests(after, fresh):
  // the {path, body} of an attempt, `fresh` true for the very first request of a run the page starts and
  // `after` the last event id seen (or null); reattach: the run is already under way (after a page
  // reload), so even the first request attaches; headers(): fresh request headers (token, language, the
  // thread's session header).
  constructor({ api, threadId, requests, headers, reattach = false, onEvent, onStatus }) {
    this.api = api;
    this.threadId = threadId;
    this.requests = requests;
    this.headers = headers;
    this.fresh = !reattach;
    this.lastEventId = null;
    this.onEvent = onEvent;
    this.onStatus = onStatus || (() => {});
    this.controller = null;
    this.aborted = false;
  }

  abort() {
    this.aborted = true;
    if (this.controller) this.controller.abort();
  }

  // Where the next attempt starts: after the last id seen (null: from the start).
  position() {
    return this.lastEventId !== null && /^\d+$/.test(this.lastEventId) ? Number(this.lastEventId) : null;
  }

  async run() {
    let failures = 0;
    for (let first = true; ; first = false) {
      const before = this.lastEventId;
      let outcome;
      try {
        outcome = await this.attempt(this.position(), first && this.fresh, first);
      } catch (error) {
        if (this.aborted) return { aborted: true };
        if (error instanceof HttpError) {
          // Another connection still holds the run until the server notices it is gone: retry.
          if (error.code !== "RUN_ALREADY_ATTACHED" || (first && this.fresh)) return { error };
        }
        outcome = { broken: error.message || String(error) };
      }
      if (!outcome.broken) return outcome;
      if (this.lastEventId !== before) failures = 0;
      if (failures >= REATTACH_ATTEMPTS) {
        return { error: new HttpError(0, "STREAM_BROKEN", `the stream broke: ${outcome.broken}`) };
      }
      failures += 1;
      this.onStatus("reconnecting", { attempt: failures, after: this.position() ?? 0 });
      await sleep(Math.min(4000, 250 * 2 ** (failures - 1)));
      if (this.aborted) return { aborted: true };
    }
  }

  // One HTTP exchange; returns {terminal} or {broken}; throws HttpError for an answer before the stream.
  async attempt(after, fresh, first) {
    this.controller = new AbortController();
    const { path, body } = this.requests(after, fresh);
    const headers = { ...this.headers(), "Content-Type": "application/json", Accept: "text/event-stream" };
    const response = await fetch(new URL(path, this.api), {
      method: "POST", headers, body: JSON.stringify(body), cache: "no-store", signal: this.controller.signal,
    });
    if (!response.ok) throw await httpError(response);
    if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      throw new HttpError(response.status, "NOT_AN_EVENT_STREAM", "the server did not answer with an event stream");
    }
    this.onStatus(first ? "streaming" : "reattached", { after: after ?? 0 });
    const reader = response.body.getReader();
    const parser = new SSEParser();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { broken: "the connection closed before the run ended" };
      for (const frame of parser.push(value)) {
        if (frame.id !== null) this.lastEventId = frame.id;
        if (frame.comment || frame.data === null) continue;
        let event;
        try {
          event = JSON.parse(frame.data);
        } catch (error) {
          this.onStatus("bad-frame", { id: frame.id, reason: error.message });
          continue;
        }
        this.onEvent(event, frame.id);
        if (event && TERMINAL.has(event.type)) {
          reader.cancel().catch(() => {});
          return { terminal: event };
        }
      }
    }
  }
}
