"""How long refusing or accepting a maximal request body takes: strict parse plus RunAgentInput validation.

Usage: ``python tools/bench.py --section validation [--repeat 3] [--size-mib 12]``.  Each shape is a body just under
the request limit; the figure is the best of ``--repeat`` runs (CPU time of this process, so other load on
the machine does not inflate it), next to plain ``json.loads`` of the same bytes as the baseline measured
in the same run.  Shapes: the message cap filled with history, 150,000 messages, one user message holding
the whole body, the deepest allowed nesting repeated until the body is full, a flood of keys and a flood
of numbers (the last four refused by the value count before parsing), and bodies holding just under the
value cap of the densest kinds (keys, nested arrays), which are parsed and validated.
"""
import argparse
import gc
import json
import os
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from iaccode_agui.web import inputs
from iaccode_agui.web import jsonbody
from iaccode_agui.config import DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_JSON_VALUES, DEFAULT_MAX_MESSAGES
from iaccode_agui.errors import AguiError


def _envelope(root: str, messages: List[Dict[str, Any]], state: Any = None) -> Dict[str, Any]:
    return {"threadId": "bench", "runId": "run-bench", "state": state if state is not None else {},
            "tools": [], "context": [], "messages": messages,
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "inv", "cwd": root}}}


def _fill(root: str, count: int, size: int) -> bytes:
    """``count`` messages (the last one from the user) with content parts sized to fill ``size`` bytes."""
    skeleton = len(json.dumps(_envelope(root, [{"id": "h%06d" % i, "role": "assistant", "content": []}
                                               for i in range(count)])))
    per = max(0, (size - skeleton) // count - 40)
    messages = [{"id": "h%06d" % i, "role": "assistant", "content": [{"type": "text", "text": "x" * per}]}
                for i in range(count - 1)]
    messages.append({"id": "u", "role": "user", "content": [{"type": "text", "text": "x" * per}]})
    return json.dumps(_envelope(root, messages)).encode()


def _one_message(root: str, size: int) -> bytes:
    skeleton = len(json.dumps(_envelope(root, [{"id": "u", "role": "user", "content": ""}])))
    return json.dumps(_envelope(root, [{"id": "u", "role": "user", "content": "x" * (size - skeleton)}])).encode()


def _deep_state(root: str, size: int) -> bytes:
    """The deepest nesting the limit allows, repeated: the most brackets per byte a valid body can have."""
    depth = DEFAULT_MAX_JSON_DEPTH - 2
    group = "[" * depth + "]" * depth
    skeleton = len(json.dumps(_envelope(root, [{"id": "u", "role": "user", "content": "hi"}], state=[])))
    count = (size - skeleton) // (len(group) + 1)
    raw = json.dumps(_envelope(root, [{"id": "u", "role": "user", "content": "hi"}], state=["@"])).encode()
    return raw.replace(b'"@"', ",".join([group] * count).encode())


def _in_state(root: str, size: int, item: bytes, count: int, keyed: bool = False) -> bytes:
    """A valid request whose ``state`` holds ``count`` copies of ``item``, padded with a text to ``size``."""
    skeleton = json.dumps(_envelope(root, [{"id": "u", "role": "user", "content": "@"}], state="#")).encode()
    if keyed:
        flood = b"{" + b",".join(b'"k%07d":' % index + item for index in range(count)) + b"}"
    else:
        flood = b"[" + b",".join([item] * count) + b"]"
    pad = max(0, size - len(skeleton) - len(flood))
    return skeleton.replace(b'"#"', flood).replace(b'"@"', b'"' + b"x" * pad + b'"')


def _validate(raw: bytes, root: str) -> str:
    try:
        inputs.parse_run_request(jsonbody.loads(raw), [root])
        return "accepted"
    except AguiError as exc:
        return "%d %s" % (exc.status, exc.code)


def _best(action: Callable[[], Any], repeat: int) -> Tuple[float, Any]:
    """Best CPU time; nothing parsed is kept alive between runs (a live tree makes every GC pass slower)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        started = time.process_time()
        result = action()
        best = min(best, time.process_time() - started)
        result = result if isinstance(result, str) else None
    return best, result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py --section validation",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mib", type=float, default=12.0)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    size = int(args.size_mib * 1024 * 1024) - 1024
    with tempfile.TemporaryDirectory() as root:
        root = os.path.realpath(root)
        shapes = [("%d messages (the cap)" % DEFAULT_MAX_MESSAGES, _fill(root, DEFAULT_MAX_MESSAGES, size)),
                  ("150,000 messages", _fill(root, 150000, size)),
                  ("one user message", _one_message(root, size)),
                  ("depth %d groups" % (DEFAULT_MAX_JSON_DEPTH - 2), _deep_state(root, size)),
                  ("key flood", _in_state(root, size, b"0", size // 14, keyed=True)),
                  ("number flood", _in_state(root, size, b"0", size // 2 - 100)),
                  ("keys at the value cap", _in_state(root, size, b"0", DEFAULT_MAX_JSON_VALUES // 2 - 40, True)),
                  ("arrays at the value cap", _in_state(root, size, b"[[[[]]]]", DEFAULT_MAX_JSON_VALUES // 5 - 40))]
        print("%-26s %9s %12s %14s %8s  %s" % ("shape", "MiB", "json.loads s", "validation s", "ratio", "outcome"))
        worst = 0.0
        for name, raw in shapes:
            base, _ = _best(lambda: json.loads(raw) and None, args.repeat)
            spent, outcome = _best(lambda: _validate(raw, root), args.repeat)
            print("%-26s %9.2f %12.3f %14.3f %8.2f  %s" % (name, len(raw) / 1048576, base, spent,
                                                          spent / base if base else 0.0, outcome))
            worst = max(worst, spent)
        print("worst-case validation of a %.0f MiB body, any shape: %.3f s CPU" % (args.size_mib, worst))
    return 0
