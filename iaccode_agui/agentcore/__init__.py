"""The AgentCore-compatible route family (``/ag-ui/agent``), a second spelling of the same run core.

A client written for a managed AgentCore harness — or any stock AG-UI client that sends
``forwardedProps: {}`` — talks to these routes; admission, state, projection and the event channel are
the ones ``POST /`` uses.  What differs lives here: the request and error spelling, attach and stop,
the event shaping (usage event, size limits), capability discovery and file links.
"""
