"""What the executors hand back: per-stage records, per-task / per-record outcomes, digests.

- :class:`StageRecord` / :class:`TaskOutcome`: a built-in app's task (:class:`NodeExecutor`);
  :func:`output_digest` hashes its sink stages' outputs, :func:`task_seed` seeds its frames.
- :class:`StageRun` / :class:`RecordOutcome`: a user record (:class:`OperatorExecutor`), with
  the operator's own outputs.
- :func:`task_summary`: a built-in app's answer (``TaskOutcome.output``), never failing the task.
- :func:`describe_failure`: the one wording of a failed stage both executors use.

Example::

    >>> task_seed("t1") == task_seed("t1"), len(output_digest([1, 2.0, "x"]))
    (True, 32)
"""

from __future__ import annotations

import dataclasses
import hashlib
import traceback as traceback_module
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["StageRecord", "TaskOutcome", "StageRun", "RecordOutcome", "task_seed",
           "output_digest", "task_summary", "describe_failure", "format_traceback",
           "exception_text"]


# ---------------------------------------------------------------------------------- NodeExecutor
@dataclass
class StageRecord:
    """One stage as it ran: its operator's start and end (epoch ms), where, and in how many
    tries (1 unless it was retried)."""

    stage: str
    unit: str
    started_at_ms: int
    finished_at_ms: int
    attempts: int


@dataclass
class TaskOutcome:
    """A finished task. ``started_at_ms``: its first stage was handed to a unit (arrival
    instead if none was); ``queue_ms``: accepted -> started; ``service_ms``: started ->
    finished; ``output_digest``: BLAKE2b of its final stages' outputs (same device, same
    digest); ``error``: why it FAILED, else None; ``output``: the task's answer, a small
    JSON-able dict (``workload.apps.registry.summarise_output``: tracks, tubes, faces...) when
    it is OK, None when it FAILED or the summary could not be made (see :func:`task_summary`)."""

    task_id: str
    app_id: str
    node_id: str
    status: str
    started_at_ms: int
    finished_at_ms: int
    queue_ms: float
    service_ms: float
    stages: list[StageRecord]
    output_digest: str
    error: str | None
    output: dict | None = None


# ------------------------------------------------------------------------------ OperatorExecutor
@dataclass
class StageRun:
    """One stage of one record as it ran: start and end of the call that gave its output
    (epoch ms), the unit, how many inputs that call had, and how many calls the record's input
    took part in (1 unless a batch failed or the stage was retried)."""

    stage: str
    unit: str
    started_at_ms: int
    finished_at_ms: int
    batch_size: int
    attempts: int


@dataclass
class RecordOutcome:
    """A finished record of a user operator.

    status: "OK" or "FAILED"; outputs: the operator's outputs for the record
    (``StagedOperator.results`` of its sink output; empty when it failed); error / traceback:
    why it failed (the traceback cut to a bounded length), else None; started_at_ms /
    finished_at_ms: epoch ms (start: its first stage was handed to a unit, arrival if none
    was); queue_ms: accepted -> started; service_ms: started -> finished; work_ms: its share of
    the units' time (every call it took part in: call time / inputs in the call), what the
    router measures node speed by; stages: the stages that gave an output, in start order.
    """

    record_id: str
    status: str
    outputs: list
    error: str | None
    traceback: str | None
    started_at_ms: int
    finished_at_ms: int
    queue_ms: float
    service_ms: float
    work_ms: float
    stages: list[StageRun]


# ---------------------------------------------------------------------------------- helpers
def task_seed(task_id: str) -> int:
    """A stable 31-bit seed from a task id (Python's ``hash()`` is salted per process).

    Example::

        >>> task_seed("t1") == task_seed("t1"), 0 <= task_seed("t1") < 2**31
        (True, True)
    """
    digest = hashlib.blake2b(task_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**31


def _digest_into(h, obj: Any) -> None:
    """Feed a stage output (tensors, dataclasses, containers, plain values) into hash ``h``."""
    import torch
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        try:
            h.update(t.numpy().tobytes())
        except TypeError:  # dtypes numpy lacks (bfloat16): hash their float32 values
            h.update(t.to(torch.float32).numpy().tobytes())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            _digest_into(h, getattr(obj, f.name))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            h.update(repr(key).encode())
            _digest_into(h, value)
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for value in obj:
            _digest_into(h, value)
    else:
        h.update(repr(obj).encode())


def output_digest(obj: Any) -> str:
    """Hex BLAKE2b (16 bytes) of a stage output."""
    h = hashlib.blake2b(digest_size=16)
    _digest_into(h, obj)
    return h.hexdigest()


def task_summary(app_id: str, outputs: dict[str, Any],
                 warn: Callable[[str, str], None] | None = None) -> dict | None:
    """A finished task's answer from its stage outputs (``summarise_output``), or None when
    that fails: the task did its work, so a summary bug must not fail it. ``warn(key,
    message)`` is told why (keyed by application and error type, so a warn-once callback logs
    each kind of failure once, not once per task).

    Example::

        >>> task_summary("video_synopsis", {}, warn=lambda key, message: print(key))
        summary:video_synopsis:KeyError
    """
    try:
        from workload.apps.registry import summarise_output
        return summarise_output(app_id, outputs)
    except Exception as exc:  # noqa: BLE001 - the result goes out without its summary
        if warn is not None:
            warn(f"summary:{app_id}:{type(exc).__name__}",
                 f"no output summary for {app_id} tasks ({type(exc).__name__}: {exc}); their "
                 "results carry output=None")
        return None


def describe_failure(stage: str, attempts: int, unit_id: str, exc: BaseException) -> str:
    """The error text of a stage that failed for good.

    Example::

        >>> describe_failure("parse", 2, "cpu:0", ValueError("bad"))
        "stage 'parse' failed after 2 attempt(s), last on cpu:0: ValueError: bad"
    """
    return (f"stage {stage!r} failed after {attempts} attempt(s), last on {unit_id}: "
            f"{type(exc).__name__}: {exception_text(exc)}")


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` raises (a user's
    exception class may do anything; the failure must still be described)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__name__} whose str() raised>"


def format_traceback(exc: BaseException, max_chars: int = 4000) -> str:
    """``exc``'s formatted traceback, cut to its last ``max_chars`` characters (the innermost
    frames and the message are what explain a failure)."""
    text = "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) <= max_chars:
        return text
    return "...\n" + text[-(max_chars - 4):]
