"""Assembling a run, admitted here or adopted after its owner died: one place for both.

The two differ in where they start (a fresh admission, or the log a dead owner left) and in how their
worker drives the task; everything else -- the channel and its bounds, the projection context from the
thread state, the state recorder, the history's hooks, the worker's end bookkeeping, and making the run
visible to this process's requests -- is the same, so it is built here.
"""
from typing import Any, Callable, Optional

from iaccode_agui.projection.projector import RunContext, RunProjector, message_scope, pipeline_mode
from iaccode_agui.sse.channel import RunChannel
from iaccode_agui.runs.history_writer import RunHistory
from iaccode_agui.runs.liverun import LiveRun
from iaccode_agui.runs.profile import publisher_for
from iaccode_agui.runs.recorder import StateRecorder
from iaccode_agui.runlog.logfiles import RunLogWriter
from iaccode_agui.runs.worker import RunWorker
from iaccode_agui.state.model import ThreadState
from iaccode_agui.state.store import RunLease

Driver = Callable[[RunWorker], None]


class RunFactory:
    def __init__(self, manager: Any) -> None:
        """``manager``: the ``RunManager`` whose settings, stores and clients the runs use, and whose
        ``run_ended`` / ``run_released`` each worker calls at its end."""
        self.manager = manager

    def channel(self, first_seq: int = 0, base_seq: Optional[int] = None,
                run_log: Optional[RunLogWriter] = None) -> RunChannel:
        """``base_seq``: the segment's first id, when it is not ``first_seq`` (a run adopted mid-segment)."""
        settings = self.manager.settings
        return RunChannel(settings.replay_buffer_events, settings.queue_max_events, run_log=run_log,
                          budget=self.manager.budget, first_seq=first_seq, base_seq=base_seq,
                          queue_max_bytes=settings.stream_buffer_bytes)

    def register(self, req: Any, state: ThreadState, lease: RunLease, channel: RunChannel,
                 prepare: Optional[Callable[[LiveRun], None]] = None) -> LiveRun:
        """Make the run visible to this process's requests; ``prepare`` completes it before they can see it.

        A request on the thread judges a live run by its worker and flags (``RunManager``'s orphan and
        abandoned-run rules): a run seen half-built would be taken for one without a worker, or for an
        abandoned one instead of an adopted one.
        """
        manager = self.manager
        run = LiveRun(req, state, lease, channel, manager.settings, manager.metrics, manager.runlogs)
        if prepare is not None:
            prepare(run)
        manager.runs.add(run)
        return run

    def context(self, req: Any, state: ThreadState, language: str) -> RunContext:
        """The projection's view of the thread's durable state for this run."""
        execution = state.execution
        applied = frozenset(item.interrupt_id for item in state.applied_resume_digests
                            if item.execution_id == execution.execution_id)
        return RunContext(
            thread_id=req.thread_id, run_id=req.run_id, parent_run_id=req.parent_run_id,
            execution_id=execution.execution_id, context_id=state.context_id,
            ros_invocation_id=execution.ros_invocation_id, language=language, task_id=execution.task_id,
            session_id=state.session_id, pending=dict(execution.pending), applied_ids=applied,
            text_digests=frozenset(execution.text_snapshot_digests), resume=req.is_resume,
            interrupt_ttl=self.manager.settings.interrupt_ttl, generic=self.manager.upstream_is_generic(),
            pipeline_sequence=execution.pipeline_sequence, pipeline_open_steps=tuple(execution.pipeline_open_steps),
            pipeline_mode=pipeline_mode(execution), workspace_created=req.cwd_created,
            message_scope=message_scope(req.is_resume, req.digest))

    def worker(self, run: LiveRun, projector: RunProjector, history: RunHistory, driver: Driver,
               language: str) -> RunWorker:
        """The run's worker: its state recorder and history hooked to the projector, its end reported back."""
        manager = self.manager
        recorder = StateRecorder(manager.store, run.thread_id, projector.ctx.execution_id, run.run_id)
        recorder.history, history.projector, run.channel.observe = history, projector, history.observe
        return RunWorker(client=manager.client, projector=projector,
                         channel=publisher_for(run.channel, run.profile, language), recorder=recorder,
                         driver=driver, on_end=lambda w: manager.run_ended(run),
                         on_release=lambda: manager.run_released(run))

