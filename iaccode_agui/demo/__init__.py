"""A built-in scripted A2A 1.0 runtime that speaks the iac-code dialect over real HTTP.

It backs ``--demo``, the adapter's tests and its benchmarks.  It never imports the adapter: it is the
independent peer that the adapter's A2A client is tested against.
"""
from iaccode_agui.demo.runtime import ScriptedRuntime
from iaccode_agui.demo.scenarios import SCENARIOS
from iaccode_agui.demo.server import DemoServer

__all__ = ["DemoServer", "ScriptedRuntime", "SCENARIOS"]
