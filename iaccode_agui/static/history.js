// Earlier runs of a thread, shown again when the thread is opened: each run the page started is read back
// from the server's run log through the read-only observer route, from its first event. The server keeps a
// finished run's log for a while (--run-log-ttl, 600 s by default); a run it no longer has is named in the
// transcript as not shown, so a short transcript is never mistaken for the whole conversation. The last run's
// terminal event also says which interrupts the thread still waits on, so a reload brings their forms back.

import { RunConnection, observerRequests } from "./stream.js";
import { tr } from "./i18n.js";

export const MAX_RUNS = 30;    // runs remembered per thread (localStorage is small)

// Errors after which the server no longer waits for the answers that were pending.
const ENDS_INTERRUPTS = new Set(["CANCELLED", "RUN_CANCELLED", "EXECUTION_EXPIRED", "EXECUTION_LOST",
  "RESUME_ALREADY_APPLIED", "A2A_EXECUTION_FAILED", "CONVERSATION_LOST"]);

// The interrupts still pending after a run ended with `result` ({terminal} or {error}, as RunConnection.run
// settles), `previous` the ones pending before it: a refused request changes nothing, a failed resume leaves
// the questions open unless its error ends them, and a finished run names the ones it raised.
export function pendingAfter(previous, result, resumed) {
  const { terminal, error } = result;
  if (error) return ENDS_INTERRUPTS.has(error.code) ? [] : previous;
  if (terminal.type === "RUN_ERROR") return resumed && !ENDS_INTERRUPTS.has(terminal.code) ? previous : [];
  const outcome = terminal.outcome || {};
  return outcome.type === "interrupt" ? outcome.interrupts || [] : [];
}

// The page's record of a run: what the user sent (a message, or the answers in words), and the ids the
// observer route asks for once the run's session event has named them.
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
// `pending` is then the interrupts pending after the last run, or null when its events could not be read.
export class HistoryReplay {
  constructor({ api, thread, runs, headers, transcript, log }) {
    Object.assign(this, { api, thread, runs, headers, transcript, log });
    this.connection = null;
    this.stopped = false;
    this.pending = null;
  }

  abort() {
    this.stopped = true;
    if (this.connection) this.connection.abort();
  }

  async run() {
    for (const record of this.runs) {
      if (this.stopped) return false;
      if (record.text) this.transcript.userMessage(record.text);
      else if (record.answered) this.transcript.notice(tr("Answers sent (run {run}).", { run: record.runId }));
      const before = this.pending || [];
      this.pending = null;
      if (!record.executionId) {
        this.transcript.notice(tr("Run {run} is not shown: it ended before the server announced it.",
          { run: record.runId }), "warning");
        continue;
      }
      const result = await this.one(record);
      if (result.terminal) this.pending = pendingAfter(before, result, record.answered);
      else if (result.error && !this.stopped) {
        const code = result.error.code;
        this.transcript.notice(tr("Run {run} is not shown: the server no longer keeps its events (finished runs are kept for --run-log-ttl seconds; {code}).", { run: record.runId, code }), "warning");
      }
    }
    return !this.stopped;
  }

  // Follows one run's log to its terminal event: RunConnection's result ({terminal}, or {error} when the
  // server cannot show it).
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
    return result;
  }
}
