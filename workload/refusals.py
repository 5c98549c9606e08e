"""What a node's online learners refused to learn from: one bounded table in its NodeFeedback.

Every learner on a node keeps its own count of refused observations per reason (non-finite,
implausible, unknown stage, ...): the batch sizer, the measured stage costs / alone baseline, the
co-run learner, the IAWP scheduler's interference model and the GPU readings. An operator
watching a job wants them in one place: each executor's NodeFeedback carries them as
``learning_refused`` (``"<learner>:<reason>" -> count``) and the placement service exports
their sum per node (``streamplace_service_node_learning_refused``).

The table is bounded whatever the learners hold: at most :data:`MAX_REFUSAL_KEYS` entries (the
largest counts first), each key at most :data:`MAX_REFUSAL_KEY_CHARS` characters, each count a
non-negative integer. The same rule checks a table that arrives in feedback
(:func:`bounded_refusals`): feedback crosses a boundary and may be hostile.

Example::

    >>> from collections import Counter
    >>> learning_refusals({"batch": Counter({"non-finite": 2}), "corun": {}, "iawp": None})
    {'batch:non-finite': 2}
    >>> bounded_refusals({"alone:implausible": 3, "x": -1, "y": float("nan"), 5: 1})
    {'alone:implausible': 3}
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["learning_refusals", "bounded_refusals", "refused_total", "MAX_REFUSAL_KEYS",
           "MAX_REFUSAL_KEY_CHARS", "MAX_REFUSAL_COUNT"]

#: Entries of one node's table at most (the learners' reasons number about 20 in all).
MAX_REFUSAL_KEYS = 32
#: Longest key kept ("<learner>:<reason>"); longer keys are cut.
MAX_REFUSAL_KEY_CHARS = 64
#: Largest count a table may say (Avro's long; beyond it a table is broken or hostile).
MAX_REFUSAL_COUNT = 2 ** 53


def _counts(source) -> dict:
    """A copy of a learner's counts (a Counter / dict, or an object with ``refused``); {} for
    anything else. Copied at once: the learners count on other threads."""
    if source is None:
        return {}
    if not isinstance(source, Mapping):
        source = getattr(source, "refused", None)
        if isinstance(source, int) and not isinstance(source, bool):
            return {"refused": source}  # a learner that counts without reasons
        if not isinstance(source, Mapping):
            return {}
    try:
        return dict(source)
    except RuntimeError:  # changed while copied (another thread): the next report has it
        return {}


def learning_refusals(sources: Mapping[str, object]) -> dict[str, int]:
    """``{"<learner>:<reason>": count}`` over ``sources`` (learner name -> its counts or an
    object with a ``refused`` Counter), bounded as :func:`bounded_refusals` says; zero
    counts are left out."""
    table: dict[str, int] = {}
    for learner, source in sources.items():
        for reason, count in _counts(source).items():
            key = f"{learner}:{reason}"
            table[key] = table.get(key, 0) + (count if isinstance(count, int) else 0)
    return bounded_refusals(table)


def bounded_refusals(table) -> dict[str, int]:
    """The entries of ``table`` that are a text key and a count in [1, MAX_REFUSAL_COUNT]
    (an int, not a bool), keys cut at MAX_REFUSAL_KEY_CHARS, the MAX_REFUSAL_KEYS largest
    counts kept (ties by key); {} when ``table`` is no mapping."""
    if not isinstance(table, Mapping):
        return {}
    kept: dict[str, int] = {}
    for key, count in list(table.items())[:10 * MAX_REFUSAL_KEYS]:
        if not isinstance(key, str) or not key or isinstance(count, bool) \
                or not isinstance(count, int) or not 0 < count <= MAX_REFUSAL_COUNT:
            continue
        key = key[:MAX_REFUSAL_KEY_CHARS]
        kept[key] = min(MAX_REFUSAL_COUNT, kept.get(key, 0) + count)
    largest = sorted(kept.items(), key=lambda item: (-item[1], item[0]))[:MAX_REFUSAL_KEYS]
    return dict(largest)


def refused_total(table) -> float:
    """The sum of a (checked) table's counts: what the service exports per node."""
    return float(sum(bounded_refusals(table).values()))
