// Earlier runs of a thread, shown again when the thread is opened: each run the page started is read back
// from the server's run log through the read-only observer route, from its first event. The server keeps a
// finished run's log for a while (--run-log-ttl, 600 s by default); a run it no longer has is named in the
// transcript as not shown, so a short transcript is never mistaken for the whole conversation.

import { RunConnection, observerRequests } from "./stream.js";
import { t } from "./i18n.js";

export const MAX_RUNS = 30;    // runs remembered per thread (localStorage is small)

// The page's record of a run: what the user sent, and the ids the observer route asks for once the run's
// session event has named them.
export function runRecord(body, text) {
  return { runId: body.runId, text, answered: Array.isArray(body.resume) };
}

export function remember(thread, record) {
  thread.runs = [...(thread.runs || []).filter((r) => r.runId !== record.runId), record].slice(-MAX_RUNS);
}

export function noteSession(thread, runId, value) {
  const record = (thread.runs || []).find((r) => r.runId === runId);
  if (!record || !value) return false;
  record.executionId = value.executionId || record.executionId;
  record.rosInvocationId = value.rosInvocationId || record.rosInvocationId;
  return true;
}

// Render `runs` of `thread` one after the other; resolves to false when stopped by abort() (the user
// switched threads), true otherwise. Each run's events go through the same handlers as a live stream.
export class HistoryReplay {
  constructor({ api, thread, runs, headers, transcript, log }) {
    Object.assign(this, { api, thread, runs, headers, transcript, log });
    this.connection = null;
    this.stopped = false;
  }

  abort() {
    this.stopped = true;
    if (this.connection) this.connection.abort();
  }

  async run() {
    for (const record of this.runs) {
      if (this.stopped) return false;
      if (record.text) this.transcript.userMessage(record.text);
      else if (record.answered) this.transcript.notice(t("Answers sent (run {run}).", { run: record.runId }));
      if (!record.executionId) {
        this.transcript.notice(t("Run {run} is not shown: it ended before the server announced it.",
          { run: record.runId }), "warning");
        continue;
      }
      const error = await this.one(record);
      if (error && !this.stopped) {
        const code = error.code;
        this.transcript.notice(t("Run {run} is not shown: the server no longer keeps its events (finished runs are kept for --run-log-ttl seconds; {code}).", { run: record.runId, code }), "warning");
      }
    }
    return !this.stopped;
  }

  // Follows one run's log to its terminal event; the error when the server cannot show it.
  async one(record) {
    const run = { threadId: this.thread.threadId, runId: record.runId, executionId: record.executionId,
      rosInvocationId: record.rosInvocationId || this.thread.rosInvocationId };
    this.connection = new RunConnection({
      api: this.api, threadId: run.threadId, requests: observerRequests(run), headers: this.headers,
      onEvent: (event, id) => {
        this.transcript.event(event);
        this.log.add(event, id);
      },
    });
    const result = await this.connection.run();
    this.connection = null;
    return result.error || null;
  }
}
