"""The upstream: a synchronous A2A 1.0 client for the iac-code runtime (or any A2A agent) and its dialect."""
