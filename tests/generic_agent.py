"""A scripted *generic* A2A 1.0 agent built only from the official ``a2a-sdk`` server classes.

The adapter must work in front of any A2A 1.0 agent, not just iac-code, so this agent deliberately uses
the SDK's own request handler, task store, JSON-RPC route and agent-card route rather than a hand-written
wire imitation: whatever the SDK puts on the wire is what the adapter has to cope with.  Its card
advertises no ``urn:iac-code:`` extension, and it ignores ``metadata.iac_code``.

Behaviour is chosen by the user's text (see ``ScriptedExecutor``).  The server runs under uvicorn in a
background thread on 127.0.0.1 with a pre-bound port-0 socket, so the card can name the real URL.
"""
import asyncio
import socket
import threading
import time
from typing import Any, Dict, List, Optional

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, TaskState
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette

ECHO_CHUNKS = ("Echo part one. ", "Echo part two.")
ARTIFACT_ID = "echo-artifact"
ARTIFACT_CHUNKS = ("chunk-1 ", "chunk-2")
QUESTION = "What is your name?"
PLAIN_REPLY = "A plain message reply."
FAILURE_TEXT = "Something went boom."
CRASH_PREFACE = "Working on it..."
STEP_DELAY = 0.02   # between streamed events, so they leave the server as separate SSE events


class ScriptedExecutor(AgentExecutor):
    """Scripts by user text: ``echo``, ``ask`` (then the follow-up answer), ``msg``, ``boom`` and ``crash``.

    ``boom`` ends the task FAILED; ``crash`` raises, which the SDK reports as a mid-stream JSON-RPC error
    (-32603) with no FAILED status update on the stream.

    Every user message it receives is recorded (as proto3 JSON) so tests can check what the adapter sent.
    """

    def __init__(self) -> None:
        self.received: List[Dict[str, Any]] = []
        self._lock = threading.Lock()

    def messages(self) -> List[Dict[str, Any]]:
        with self._lock:
            return list(self.received)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        with self._lock:
            self.received.append(MessageToDict(message))
        text = context.get_user_input().strip()
        task = context.current_task
        if task is None and text == "msg":
            await event_queue.enqueue_event(new_text_message(PLAIN_REPLY, context_id=context.context_id))
            return
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words: str) -> Message:
            return updater.new_agent_message([new_text_part(words)])

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.complete(say("Hello, %s!" % text))
        elif text == "echo":
            for chunk in ECHO_CHUNKS:
                await asyncio.sleep(STEP_DELAY)
                await updater.start_work(say(chunk))
            await asyncio.sleep(STEP_DELAY)
            await updater.add_artifact([new_text_part(ARTIFACT_CHUNKS[0])], artifact_id=ARTIFACT_ID, name="echo.txt")
            await asyncio.sleep(STEP_DELAY)
            await updater.add_artifact([new_text_part(ARTIFACT_CHUNKS[1])], artifact_id=ARTIFACT_ID, name="echo.txt",
                                       append=True, last_chunk=True)
            await updater.complete()
        elif text == "ask":
            await updater.requires_input(say(QUESTION))
        elif text == "boom":
            await updater.failed(say(FAILURE_TEXT))
        elif text == "crash":
            await updater.start_work(say(CRASH_PREFACE))
            raise RuntimeError("scripted crash")
        else:
            await updater.complete(say("Unscripted: %s" % text))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def agent_card(url: str) -> AgentCard:
    return AgentCard(
        name="generic-scripted-agent", description="A plain A2A 1.0 agent for adapter tests", version="0.0.1",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="scripted", name="scripted", description="scripted replies", tags=["test"])])


class GenericAgentServer:
    """The SDK's Starlette app under uvicorn in a thread; ``url`` ends with ``/`` (JSON-RPC lives at ``/``)."""

    def __init__(self, sock: socket.socket, executor: ScriptedExecutor) -> None:
        host, port = sock.getsockname()[:2]
        self.url = "http://%s:%d/" % (host, port)
        self.executor = executor
        handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(),
                                        agent_card=agent_card(self.url))
        app = Starlette(routes=create_agent_card_routes(agent_card(self.url)) + create_jsonrpc_routes(handler, "/"))
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="generic-a2a-agent", daemon=True)

    @classmethod
    def start(cls, timeout: float = 10.0) -> "GenericAgentServer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        server = cls(sock, ScriptedExecutor())
        server._thread.start()
        deadline = time.monotonic() + timeout
        while not server._server.started:
            if not server._thread.is_alive() or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("the generic A2A agent did not start")
            time.sleep(0.01)
        return server

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    def messages(self) -> List[Dict[str, Any]]:
        """User messages the agent received, oldest first (proto3 JSON, camelCase)."""
        return self.executor.messages()


def first_text(message: Dict[str, Any]) -> Optional[str]:
    for part in message.get("parts", []):
        if "text" in part:
            return part["text"]
    return None
