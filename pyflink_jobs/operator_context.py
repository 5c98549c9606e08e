"""The runtime context the user's operator sees: one numbering over all its instances.

A plain ``map`` with parallelism N runs N instances, numbered 0..N-1, and a user's ``open``
may rely on that (e.g. ids unique across instances as ``count * N + index``). Under the hook
the operator runs in several Flink operators: one executor operator per TaskManager (each
with its own parallelism, so each instance alone sees "0 of 1"), and with ``routing=
"colocated"`` also inside every router. Handed to the user as it is, that context numbered two
instances alike (a probe job made 28 duplicate ids out of 60). :class:`OperatorInstanceContext`
wraps it and answers the numbering questions for the operator as a whole: instance
``first + own index`` of ``total``; everything else is the wrapped context's.

It also refuses what the hook cannot give: keyed state (``get_state`` and the other state
getters). The hook moves each record to the node the policy picks, so per-key state would be
split across instances; the refusal says so at ``open`` instead of PyFlink's error later.

Example::

    >>> class Inner:
    ...     def get_index_of_this_subtask(self): return 1
    ...     def get_number_of_parallel_subtasks(self): return 2
    ...     def get_task_name(self): return "streamplace-executor-tm_b"
    >>> ctx = OperatorInstanceContext(Inner(), first=3, total=5)
    >>> ctx.get_index_of_this_subtask(), ctx.get_number_of_parallel_subtasks()
    (4, 5)
    >>> ctx.get_task_name()
    'streamplace-executor-tm_b'
"""

from __future__ import annotations

from pyflink_jobs.flink_ops import subtask_index

__all__ = ["OperatorInstanceContext", "StateNotAvailable", "operator_context"]

_STATE_GETTERS = ("get_state", "get_list_state", "get_map_state", "get_reducing_state",
                  "get_aggregating_state")


class StateNotAvailable(RuntimeError):
    """The user's operator asked for keyed state, which the hook cannot keep."""


class OperatorInstanceContext:
    """A PyFlink ``RuntimeContext`` seen as instance ``first + own index`` of ``total``."""

    def __init__(self, inner, first: int, total: int):
        self._inner, self._first, self._total = inner, int(first), int(total)

    def get_index_of_this_subtask(self) -> int:
        # subtask_index: also in thread mode, where PyFlink 2.2's own call raises
        return self._first + subtask_index(self._inner)

    def get_number_of_parallel_subtasks(self) -> int:
        return self._total

    def get_max_number_of_parallel_subtasks(self) -> int:
        inner = getattr(self._inner, "get_max_number_of_parallel_subtasks", None)
        return max(self._total, int(inner())) if inner is not None else self._total

    def get_task_name_with_subtasks(self) -> str:
        return (f"{self._inner.get_task_name()} ({self.get_index_of_this_subtask() + 1}/"
                f"{self._total})")

    def __getattr__(self, name):
        if name in _STATE_GETTERS:
            def refuse(*_args, **_kwargs):
                raise StateNotAvailable(
                    f"{name}: the streamplace hook runs this operator as a stateless "
                    "per-record function and moves records between TaskManagers, so keyed "
                    "state could not follow them. Keep stateful work before or after "
                    "hook.apply in the job (e.g. key_by(...).map(...) on its outputs)")
            return refuse
        return getattr(self._inner, name)


def operator_context(runtime_context, first: int, total: int):
    """``runtime_context`` as the user's operator should see it: wrapped when the hook knows
    how many instances the operator has (``total`` > 0), else as it is (no context: None)."""
    if runtime_context is None or total <= 0:
        return runtime_context
    return OperatorInstanceContext(runtime_context, first, total)
