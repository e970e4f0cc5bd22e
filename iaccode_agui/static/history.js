// A thread's conversation as the server keeps it: GET ag-ui/agent/threads/{threadId}/messages answers with
// the thread's AG-UI messages for as long as the server keeps the thread, on every host that serves it (see
// docs/history.rst). Opening a thread or reloading the page shows them; the interrupts the conversation
// shows unanswered at its end are the questions the thread still waits on, so a reload brings their forms back.

export const INTERRUPT_ACTIVITY = "iac-code.interrupt.v1";

export function historyPath(threadId) {
  return `ag-ui/agent/threads/${encodeURIComponent(threadId)}/messages`;
}

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

// The interrupts a stored conversation leaves waiting: the ones after its last user message (a later turn
// supersedes the questions before it) that carry no answer. The server writes the conversation before it
// lets the thread's next run start, so this is what it waits on; an expired one shows as expired in its form.
export function pendingIn(messages) {
  let last = -1;
  messages.forEach((message, index) => { if (message.role === "user") last = index; });
  return messages.slice(last + 1).filter((m) => m.role === "activity" && m.activityType === INTERRUPT_ACTIVITY
    && m.content && m.content.interrupt && !m.content.answer).map((m) => m.content.interrupt);
}
