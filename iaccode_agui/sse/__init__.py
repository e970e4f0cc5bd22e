"""Server-Sent Events to the client: the codec, the hand-off from a run, the response generator, heartbeats."""
