// Incremental Server-Sent Events parser for a streamed fetch() body.
//
// Frames are separated by a blank line; the last, possibly incomplete frame is kept until more bytes
// arrive (a network chunk may end anywhere, even inside a UTF-8 sequence, which TextDecoder's stream
// mode handles). Each frame's `id:` is kept so a broken stream can be re-attached with Last-Event-ID.
// Comment lines (": heartbeat") keep the connection alive and are reported separately.

export class SSEParser {
  constructor() {
    this.buffer = "";
    this.decoder = new TextDecoder("utf-8");
    this.lastEventId = null;
  }

  // Feed raw bytes (Uint8Array) or text; returns the complete frames parsed so far, in order.
  push(chunk) {
    const text = typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    this.buffer += text.replace(/\r\n?/g, "\n");
    const frames = this.buffer.split("\n\n");
    this.buffer = frames.pop();
    const out = [];
    for (const frame of frames) {
      const parsed = parseFrame(frame);
      if (parsed === null) continue;
      if (parsed.id !== null) this.lastEventId = parsed.id;
      out.push(parsed);
    }
    return out;
  }

  // True when bytes of an unfinished frame are still waiting: the stream ended mid-event.
  get pending() {
    return this.buffer.trim() !== "";
  }
}

// One frame -> {id, event, data, comment} or null for an empty frame. `data` is the joined text of
// every data: line (a JSON payload for AG-UI); `comment` is true for a frame made only of comments.
export function parseFrame(frame) {
  let id = null;
  let event = "message";
  const data = [];
  let comments = 0;
  for (const line of frame.split("\n")) {
    if (line === "") continue;
    if (line.startsWith(":")) {
      comments += 1;
      continue;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "id" && !value.includes("\0")) id = value;
    else if (field === "event") event = value;
  }
  if (data.length === 0 && id === null) {
    return comments > 0 ? { id: null, event, data: null, comment: true } : null;
  }
  return { id, event, data: data.length ? data.join("\n") : null, comment: false };
}
