// One AG-UI run over fetch(): POST the RunAgentInput, read the SSE body as it streams, and re-attach
// with Last-Event-ID when the connection breaks before the run's terminal event.
//
// The promise returned by run() always settles with exactly one of: the terminal event (RUN_FINISHED
// or RUN_ERROR), a clear HTTP/stream error, or "aborted" (the page was left) - so no caller can end up
// with a spinner that never stops.

import { SSEParser } from "./sse.js";

const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);
const REATTACH_ATTEMPTS = 6;
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

export class RunConnection {
  // url: the run endpoint; body: the RunAgentInput; headers(): fresh request headers (token, language);
  // lastEventId: set to re-attach to a run already under way (after a page reload).
  constructor({ url, body, headers, lastEventId = null, onEvent, onStatus }) {
    this.url = url;
    this.body = JSON.stringify(body);
    this.headers = headers;
    this.lastEventId = lastEventId;
    this.onEvent = onEvent;
    this.onStatus = onStatus || (() => {});
    this.controller = null;
    this.aborted = false;
  }

  abort() {
    this.aborted = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let failures = 0;
    for (;;) {
      const before = this.lastEventId;
      let outcome;
      try {
        outcome = await this.attempt();
      } catch (error) {
        if (this.aborted) return { aborted: true };
        if (error instanceof HttpError) {
          // Another connection still holds the run until the server notices it is gone: retry.
          if (error.code !== "RUN_ALREADY_ATTACHED" || this.lastEventId === null) return { error };
        }
        outcome = { broken: error.message || String(error) };
      }
      if (!outcome.broken) return outcome;
      if (this.lastEventId !== before) failures = 0;
      if (this.lastEventId === null || failures >= REATTACH_ATTEMPTS) {
        return { error: new HttpError(0, "STREAM_BROKEN", `the stream broke: ${outcome.broken}`) };
      }
      failures += 1;
      this.onStatus("reconnecting", { attempt: failures, after: this.lastEventId });
      await sleep(Math.min(4000, 250 * 2 ** (failures - 1)));
      if (this.aborted) return { aborted: true };
    }
  }

  // One HTTP exchange; returns {terminal} or {broken}; throws HttpError for an answer before the stream.
  async attempt() {
    this.controller = new AbortController();
    const headers = { ...this.headers(), "Content-Type": "application/json", Accept: "text/event-stream" };
    if (this.lastEventId !== null) headers["Last-Event-ID"] = this.lastEventId;
    const response = await fetch(this.url, {
      method: "POST", headers, body: this.body, cache: "no-store", signal: this.controller.signal,
    });
    if (!response.ok) throw await httpError(response);
    if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      throw new HttpError(response.status, "NOT_AN_EVENT_STREAM", "the server did not answer with an event stream");
    }
    this.onStatus(this.lastEventId === null ? "streaming" : "reattached", { after: this.lastEventId });
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
