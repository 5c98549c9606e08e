"""What the hook reads of a user's job before it adds anything to it (:class:`JobShape`).

``StreamplaceHook.apply`` depends on the job it is added to: where the job runs (a cluster, or
the script's own mini cluster), whether its input ends, its runtime mode, how many hooks it
already has, and whether the stream is keyed. Each is read from PyFlink here, and what the hook
cannot honour is refused with the reason.

Example::

    shape = JobShape.read(env, stream)     # refuses a KeyedStream or a BATCH-mode job
    prefix = shape.uid_prefix("streamplace")
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyflink_jobs.flink_ops import (disable_python_chaining, execution_target,
                                    input_is_bounded, runtime_mode)

__all__ = ["JobShape"]

log = logging.getLogger(__name__)

#: the attribute of a PyFlink environment that counts the hook's applies on it
APPLIES_ATTRIBUTE = "_streamplace_applies"


@dataclass(frozen=True)
class JobShape:
    """local: the job runs in this process's mini cluster (``execution.target: local``);
    bounded: every source behind the stream is bounded; apply_index: 1 for the job's first
    ``apply``, 2 for its second..."""

    local: bool
    bounded: bool
    apply_index: int

    @classmethod
    def read(cls, env, stream) -> JobShape:
        """Read the job, count this apply on ``env``, and refuse what the hook cannot run."""
        _refuse_keyed(stream)
        bounded = input_is_bounded(stream)
        mode = runtime_mode(stream)
        if mode == "BATCH" or (mode == "AUTOMATIC" and bounded):
            raise ValueError(
                "the hook runs in streaming execution mode, and this job is set to BATCH "
                f"(execution.runtime-mode {mode}): in BATCH mode the router and its executors "
                "would exchange records through blocking shuffles, which the small "
                "TaskManagers this was checked on could not give network buffers for (the "
                "job restarted until it failed). Leave the runtime mode at STREAMING: a "
                "bounded input (from_collection, a bounded KafkaSource) still finishes the "
                "job once every record's output is out")
        index = getattr(env, APPLIES_ATTRIBUTE, 0) + 1
        try:
            setattr(env, APPLIES_ATTRIBUTE, index)
        except AttributeError:  # a stand-in environment (tests): one apply
            index = 1
        local = execution_target(env) == "local"
        if local:
            # In one slot sharing group PyFlink chains the hook's Python operators across
            # side outputs: the executor's dead letters reached the next operator's main
            # output ("'tuple' object has no attribute 'encode'"), and under
            # execute_and_collect the executor-split chain was built twice (uid "Hash
            # collision"). Without Python chaining each runs as its own operator.
            disable_python_chaining(env)
        return cls(local, bounded, index)

    def uid_prefix(self, base: str) -> str:
        """The n-th apply on one job gets uids of its own, or the job would be refused ("Hash
        collision on user-specified ID"); the order of the applies in the job's code keeps
        them stable across resubmissions."""
        return base if self.apply_index == 1 else f"{base}-{self.apply_index}"


def _refuse_keyed(stream) -> None:
    """Refuse any stream but a plain DataStream: a KeyedStream, and PyFlink's windowed,
    connected and broadcast streams and sinks (the hook's router needs ``DataStream.process``;
    they have none, and failed at runtime with an AttributeError). An object that is not
    PyFlink's at all is a stand-in (tests) and passes."""
    try:
        from pyflink.datastream import DataStream, KeyedStream
    except ImportError:  # no PyFlink: a stand-in stream (tests)
        return
    if isinstance(stream, KeyedStream):
        raise ValueError(
            "hook.apply takes a DataStream, and this is a KeyedStream (key_by): keying keeps "
            "each key's records and state on one instance, and the hook moves records between "
            "nodes, so it cannot keep that promise. Apply the hook to the stream before "
            "key_by (its operator is stateless per record), and key its outputs afterwards")
    if isinstance(stream, DataStream) or \
            not (type(stream).__module__ or "").startswith("pyflink."):
        return
    grouped = ("a window or a second input groups records for a function the hook does not "
               "call")
    # what made each of PyFlink's other streams, and why the hook cannot take it
    made_by, why = {
        "WindowedStream": ("key_by(...).window / count_window", grouped),
        "AllWindowedStream": ("window_all", grouped),
        "ConnectedStreams": ("connect", grouped),
        "BroadcastConnectedStream": ("connect(a broadcast stream)", grouped),
        "BroadcastStream": ("broadcast", "a broadcast stream is only a second input"),
        "DataStreamSink": ("sink_to / add_sink / print", "a sink has no records to go on"),
        "Table": ("", "a Table is no stream of records (t_env.to_data_stream(table) gives "
                  "one)"),
    }.get(type(stream).__name__, ("", grouped))
    kind = type(stream).__name__
    article = "an" if kind[:1] in "AEIOU" else "a"
    named = f"{article} {kind} ({made_by})" if made_by else f"{article} {kind}"
    step = made_by or f"the step that made this {kind}"
    raise ValueError(
        f"hook.apply takes a DataStream, and this is {named}: the hook's operator runs per "
        f"record, and {why}. Apply the hook to the DataStream before {step}: it returns a "
        f"DataStream of the operator's outputs, to window, connect or sink afterwards")
