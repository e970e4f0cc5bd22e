"""The AG-UI ``AgentCapabilities`` document, built from the live settings on every request.

Absent fields mean "not declared", so everything this server does (or explicitly does not do) is
spelled out; the ``custom.iacCode`` group carries the limits a client needs to stay within them.
"""
from typing import Any, Dict

from iaccode_agui.config import MAX_CLIENT_TOOL_BYTES, MAX_CLIENT_TOOLS, Settings


def capabilities(settings: Settings, *, generic_upstream: bool, draining: bool, prefix: str = "") -> Dict[str, Any]:
    """``prefix`` is where the application is mounted (``SCRIPT_NAME``): the routes named are the ones that answer."""
    iac_code = not generic_upstream
    return {
        "identity": {
            "name": "iaccode_agui",
            "type": "a2a" if generic_upstream else "iac-code",
            "description": "AG-UI front for an A2A 1.0 execution runtime" + ("" if generic_upstream else " (iac-code)"),
            "version": settings.server_version,
        },
        "transport": {"streaming": True, "websocket": False, "httpBinary": False, "pushNotifications": False,
                      "resumable": True},
        # The agent calls its own tools and never a client's: tools a client declares are refused, or, with
        # --client-tools ignore, accepted and not given to the runtime (``custom.iacCode.clientTools``).
        "tools": {"supported": True, "clientProvided": False},
        "state": {"snapshots": False, "deltas": False},
        "reasoning": {"supported": iac_code, "streaming": iac_code, "encrypted": False},
        "multimodal": {"input": {"image": True, "audio": False, "video": False, "pdf": False, "file": False},
                       "output": {"image": False, "audio": False}},
        "execution": {"codeExecution": iac_code},
        "humanInTheLoop": {"supported": True, "interrupts": True, "approvals": iac_code, "approveWithEdits": False,
                           "interventions": False, "feedback": False},
        "custom": {"iacCode": _details(settings, draining, prefix.rstrip("/"))},
    }


def _details(settings: Settings, draining: bool, prefix: str) -> Dict[str, Any]:
    return {
        "routes": {"run": prefix + "/", "agentcore": prefix + "/ag-ui/agent", "stop": prefix + "/ag-ui/agent/stop"},
        # Each thread's conversation is kept by the server (docs/history.rst), on every process of the state
        # directory, and sent as MESSAGES_SNAPSHOT where a stream needs it.
        "history": {"served": True, "route": prefix + "/threads/{threadId}/messages",
                    "agentcoreRoute": prefix + "/ag-ui/agent/threads/{threadId}/messages",
                    "messagesSnapshot": settings.messages_snapshot, "maxMessages": settings.history_max_messages,
                    "maxBytes": settings.history_max_bytes},
        "imageInput": "inline base64 only (PNG, JPEG, GIF, WebP); no remote URLs",
        "attach": {"afterSequence": True, "lastEventId": True},
        "clientTools": settings.client_tools,
        "serverDefaults": settings.default_cwd is not None,   # forwardedProps may be {} on POST / as well
        "defaultCwd": settings.default_cwd,   # where such a run works: the console starts its workspace field there
        "draining": draining,
        "interruptTtlSeconds": settings.interrupt_ttl,
        "reconnectGraceSeconds": settings.reconnect_grace,
        "publishFiles": settings.publish_files,
        "fileLinkTtlSeconds": settings.file_link_ttl if settings.publish_files else None,
        "limits": {
            "maxRequestBytes": settings.max_request_bytes,
            "maxAgentcoreRequestBytes": settings.agentcore_max_request_bytes,
            "maxImageBytes": settings.max_image_bytes,
            "maxImagesBytes": settings.max_images_bytes,
            "maxSseEventBytes": settings.max_sse_event_bytes,
            "maxClientTools": MAX_CLIENT_TOOLS,
            "maxClientToolBytes": MAX_CLIENT_TOOL_BYTES,
            "maxActiveRuns": settings.max_active_runs or None,
        },
    }
