"""Bounds on what one task may be, checked where tasks enter, before one costs a worker its memory.

A task arrives as a streamplace TaskEvent (``input_size``: pixels of its clip) or as a user's
record (``task_size``: serialized bytes by default). The Avro contract bounds neither: a
TaskEvent with ``input_size`` 10**8 decodes fine, and on the real cluster such a task held
4.5-10 GB in its Python worker and blocked checkpoints for minutes; a negative size poisoned the
learner. :class:`TaskLimits` says what is acceptable; the router refuses the rest into its
dead-letter output with the reason (stage ``"limits"``) and goes on with the next record.

**The size rule** (:meth:`TaskLimits.from_memory`): a task is refused when its size times what
one unit of size costs in memory exceeds a fraction of the smallest TaskManager's memory::

    max_size = floor(memory_fraction * memory_bytes / bytes_per_unit)

- ``memory_fraction`` = :data:`MEMORY_FRACTION` (0.5): one task may take at most half of a
  node, so it cannot exhaust the node by itself; the other half is for the JVM, the other tasks
  in flight and checkpoint buffers.
- ``bytes_per_unit`` for the built-in video apps = :data:`BYTES_PER_PIXEL` (100): measured, the
  10**8-pixel task above held 45-100 bytes per pixel (float32 frames, blurred copies, pyramid
  octaves, background model, difference frames); we take the top of that range.
- ``bytes_per_unit`` for user operators = :data:`BYTES_PER_RECORD_BYTE` (16), an assumption: a
  record is held as Kafka bytes, pickled into the router, pickled again to the executor,
  unpickled there and turned into the operator's own objects (parsed JSON weighs several times
  its text).

Without a cluster spec the memory is :data:`DEFAULT_NODE_MEMORY_BYTES` (1.5 GiB, the smallest
TaskManager of the shipped ``default`` spec), which makes the laptop defaults 8,053,063 pixels
(:data:`DEFAULT_MAX_TASK_SIZE`) and 50,331,648 record bytes. The largest task the project's own
generators send to a cluster is 1,048,576 pixels (``streamplace.kafka_io``'s cap; the trace
replay stays within 20,000-200,000), so the defaults leave a margin of about 8x. (The
simulator's paper scenario models clips of up to 460.8 M pixels, 640x480 at 25 fps for 60 s;
those never pass through a router, and on a real worker they would be the tasks above.)

The other bounds: ``expected_work_ms`` finite, >= 0 and at most a day
(:data:`DEFAULT_MAX_EXPECTED_WORK_MS`: no streaming task runs longer; a bigger number is a unit
mistake or garbage); task ids and task types at most 200 characters (labels, not payloads).

Example::

    >>> limits = TaskLimits.from_memory(4 << 30, max_size_by_type={"face_recognition": 10**6})
    >>> limits.max_size
    21474836
    >>> limits.check("video_synopsis", 5_000_000) is None
    True
    >>> limits.check("face_recognition", 5_000_000)
    'size is 5000000, above the limit 1000000 for task type face_recognition'
    >>> limits.check("video_synopsis", 4096, expected_work_ms=float("nan"))
    'expected_work_ms must be a finite number, got nan'
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["TaskLimits", "BYTES_PER_PIXEL", "BYTES_PER_RECORD_BYTE", "MEMORY_FRACTION",
           "DEFAULT_NODE_MEMORY_BYTES", "DEFAULT_MAX_TASK_SIZE", "DEFAULT_MAX_EXPECTED_WORK_MS",
           "DEFAULT_MAX_TASK_ID_CHARS", "DEFAULT_MAX_TASK_TYPE_CHARS", "OPERATOR_FIELDS",
           "TASK_EVENT_FIELDS", "short_repr", "text_safe", "finite_real", "require_count",
           "default_task_type_problem", "wait_seconds", "MAX_MODEL_VERSION"]

#: Model versions are counts of the placement service's publications: an int in [0, 2**53]
#: (routers and the service refuse or ignore others)
MAX_MODEL_VERSION = 1 << 53

#: Memory one pixel of a built-in video app's task costs while it runs (measured: 45-100).
BYTES_PER_PIXEL = 100
#: Memory one serialized byte of a user's record costs between the router and the operator
#: (an assumption; see the module docstring).
BYTES_PER_RECORD_BYTE = 16
#: The share of a node's memory one task may take.
MEMORY_FRACTION = 0.5
#: The node memory assumed without a cluster spec: the smallest TaskManager of the shipped
#: ``default`` spec (256 MB task heap + 256 MB managed + 1,024 MB fixed JVM parts).
DEFAULT_NODE_MEMORY_BYTES = 1536 << 20
#: The laptop default for TaskEvents (pixels): 8,053,063.
DEFAULT_MAX_TASK_SIZE = int(MEMORY_FRACTION * DEFAULT_NODE_MEMORY_BYTES // BYTES_PER_PIXEL)
DEFAULT_MAX_EXPECTED_WORK_MS = 24 * 3600 * 1000.0
DEFAULT_MAX_TASK_ID_CHARS = 200
DEFAULT_MAX_TASK_TYPE_CHARS = 200

#: How a refusal names the fields it checked: a user operator's words, and the TaskEvent's.
OPERATOR_FIELDS = ("task_id", "task_type", "size", "expected_work_ms")
TASK_EVENT_FIELDS = ("task_id", "app_id", "input_size", "expected_work_ms")


@dataclass(frozen=True)
class TaskLimits:
    """What one task may be (see the module docstring). ``max_size_by_type`` maps a task type
    (a built-in app id such as ``face_recognition``, or a user operator's task type) to its own
    maximum size, above or below ``max_size``, which holds for every other type.

    The fields are checked when the limits are made (a wrong setting fails the job's build, not
    its records); :meth:`check` never raises, whatever a record holds."""

    max_size: int = DEFAULT_MAX_TASK_SIZE
    # hash=False: a dict cannot be hashed; the limits still compare equal field by field.
    max_size_by_type: Mapping[str, int] = field(default_factory=dict, hash=False)
    max_expected_work_ms: float = DEFAULT_MAX_EXPECTED_WORK_MS
    max_task_id_chars: int = DEFAULT_MAX_TASK_ID_CHARS
    max_task_type_chars: int = DEFAULT_MAX_TASK_TYPE_CHARS

    def __post_init__(self) -> None:
        # A plain dict copy: the limits travel pickled to Flink's Python workers, and a caller
        # changing its dict afterwards must not change them.
        object.__setattr__(self, "max_size_by_type", dict(self.max_size_by_type or {}))
        for name in ("max_size", "max_task_id_chars", "max_task_type_chars"):
            require_count(name, getattr(self, name), minimum=1 if "chars" in name else 0)
        for task_type, size in self.max_size_by_type.items():
            if not isinstance(task_type, str) or not task_type:
                raise ValueError(f"max_size_by_type keys must be task type names, got "
                                 f"{task_type!r}")
            require_count(f"max_size_by_type[{task_type!r}]", size, minimum=0)
        work = self.max_expected_work_ms
        if not _is_real(work) or not math.isfinite(work) or work < 0:
            raise ValueError(f"max_expected_work_ms must be a finite number >= 0, got {work!r}")

    @classmethod
    def from_memory(cls, memory_bytes: int | float, bytes_per_unit: float = BYTES_PER_PIXEL,
                    memory_fraction: float = MEMORY_FRACTION, **other_fields) -> TaskLimits:
        """Limits whose ``max_size`` is ``floor(memory_fraction * memory_bytes /
        bytes_per_unit)``: a task whose size times its per-unit memory cost exceeds that share
        of the smallest node's memory is refused. ``bytes_per_unit``: :data:`BYTES_PER_PIXEL`
        for TaskEvents of the built-in apps, :data:`BYTES_PER_RECORD_BYTE` for user records
        sized by their serialized bytes. ``other_fields``: the other fields, e.g.
        ``max_size_by_type``."""
        for name, value in (("memory_bytes", memory_bytes), ("bytes_per_unit", bytes_per_unit)):
            if not _is_real(value) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not _is_real(memory_fraction) or not 0 < memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}")
        return cls(max_size=int(memory_fraction * memory_bytes // bytes_per_unit),
                   **other_fields)

    @classmethod
    def for_task_events(cls, memory_bytes: int = DEFAULT_NODE_MEMORY_BYTES) -> TaskLimits:
        """Limits for streamplace TaskEvents (sizes in pixels) on nodes of ``memory_bytes``."""
        return cls.from_memory(memory_bytes, BYTES_PER_PIXEL)

    @classmethod
    def for_operator_records(cls, memory_bytes: int = DEFAULT_NODE_MEMORY_BYTES) -> TaskLimits:
        """Limits for a user operator's records (sizes in serialized bytes)."""
        return cls.from_memory(memory_bytes, BYTES_PER_RECORD_BYTE)

    def max_size_for(self, task_type: str) -> int:
        """The maximum size of a task of ``task_type``."""
        return self.max_size_by_type.get(task_type, self.max_size)

    def check(self, task_type, size, expected_work_ms=None, task_id=None,
              names: tuple[str, str, str, str] = OPERATOR_FIELDS) -> str | None:
        """Why a task of ``task_type`` and ``size`` is refused, or None when it is within the
        limits. ``expected_work_ms`` and ``task_id`` are checked unless None; ``names``: how
        the reason calls the fields (task id, type, size, expected work). Never raises."""
        try:
            return self._problem(task_type, size, expected_work_ms, task_id, names)
        except Exception as exc:  # noqa: BLE001 - e.g. a str subclass whose len() raises
            return f"the task could not be checked: {type(exc).__name__}"

    def _problem(self, task_type, size, expected_work_ms, task_id, names) -> str | None:
        id_name, type_name, size_name, work_name = names
        if task_id is not None:
            reason = _text_problem(id_name, task_id, self.max_task_id_chars)
            if reason:
                return reason
        reason = _text_problem(type_name, task_type, self.max_task_type_chars)
        if reason:
            return reason
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            return f"{size_name} must be an integer, got {short_repr(size)}"
        if size < 0:
            return f"{size_name} must be >= 0, got {short_repr(size)}"
        limit = self.max_size_for(task_type)
        if size > limit:
            return (f"{size_name} is {short_repr(size)}, above the limit {limit} for task "
                    f"type {task_type}")
        if expected_work_ms is not None:
            return _work_problem(work_name, expected_work_ms, self.max_expected_work_ms)
        return None

    def check_event(self, event) -> str | None:
        """:meth:`check` for a decoded TaskEvent (a dict), naming its Avro fields."""
        if not isinstance(event, Mapping):
            return f"a TaskEvent must be a record, got {type(event).__name__}"
        return self.check(event.get("app_id"), event.get("input_size"),
                          event.get("expected_work_ms"), task_id=event.get("task_id"),
                          names=TASK_EVENT_FIELDS)


def _text_problem(name: str, value, max_chars: int) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{name} must be a non-empty string, got {short_repr(value)}"
    if len(value) > max_chars:
        return f"{name} has {len(value)} characters, more than the limit {max_chars}"
    return None


def _work_problem(name: str, value, max_ms: float) -> str | None:
    if not _is_real(value):
        return f"{name} must be a number, got {short_repr(value)}"
    try:
        value = float(value)
    except OverflowError:  # an int too big for a float is far above any limit
        return f"{name} is {short_repr(value)}, above the limit {max_ms:g} ms"
    if not math.isfinite(value):
        return f"{name} must be a finite number, got {value}"
    if value < 0:
        return f"{name} must be >= 0, got {value}"
    if value > max_ms:
        return f"{name} is {value:g}, above the limit {max_ms:g} ms"
    return None


def finite_real(value) -> float | None:
    """``value`` as a finite float, or None when it is not a finite real number (bools,
    strings and None included: a string that parses is still a broken record). Integers too
    large for a float are finite: they become the largest float of their sign (and clamp).

    >>> finite_real(2), finite_real(True), finite_real("0.5"), finite_real(float("nan"))
    (2.0, None, None, None)
    """
    if not _is_real(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return sys.float_info.max if value > 0 else -sys.float_info.max
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require_count(name: str, value, minimum: int) -> None:
    """A setting that must be an integer >= ``minimum`` (bools refused): ValueError if not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def text_safe(value: str) -> str:
    """``value`` if UTF-8 can encode it, else with each lone surrogate as its escape text
    (``json.loads`` and Python strings accept lone surrogates; a UTF-8 encoder, Avro's or an
    HTTP response's, refuses them).

    >>> text_safe("ok"), text_safe("a\\ud800b")
    ('ok', 'a\\\\ud800b')
    """
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def default_task_type_problem(name) -> str | None:
    r"""None when an operator's ``name`` can be every record's task type (what the hook uses
    when no ``task_type`` function is given); else why not, in the words the hook refuses it
    with (at build time and, for an operator made by hand, when the router opens). A type is
    a label that travels in feedback and gauges: a lone surrogate cannot be encoded there and a
    control character is no label.

    >>> default_task_type_problem("enrich") is None
    True
    >>> default_task_type_problem("enrich\n")[:40]
    "the operator's name, the default task ty"
    """
    if isinstance(name, str) and 0 < len(name) <= DEFAULT_MAX_TASK_TYPE_CHARS \
            and name.isprintable():
        return None
    return (f"the operator's name, the default task type, must be a non-empty printable "
            f"string of at most {DEFAULT_MAX_TASK_TYPE_CHARS} characters, got "
            f"{short_repr(name)}: name the operator (name=) or give task_type=")


def wait_seconds(name: str, value, most: float) -> float:
    """``value`` as the seconds a thread waits between its rounds (``Event.wait``): a finite
    number > 0 and at most ``most`` (``threading.TIMEOUT_MAX`` where the thread waits); else a
    ValueError naming ``name``. A 0, negative or NaN wait returns at once: the thread spins (a
    feedback report or a model poll every few microseconds).

    >>> wait_seconds("interval", 2, most=3600.0)
    2.0
    """
    seconds = finite_real(value)
    if seconds is None or not 0 < seconds <= most:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got "
                         f"{short_repr(value)}")
    return seconds


def short_repr(value) -> str:
    """A short, safe rendering of a hostile value for a reason: an int of a million digits
    cannot even be turned into text (Python refuses beyond 4,300 digits), and a user's object's
    ``repr`` may raise."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        digits = int(value).bit_length() * 0.30103
        if digits > 30:
            return f"an integer of about {int(digits) + 1} digits"
        return str(int(value))
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - whatever the object does, the reason must be made
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."
