"""Energy of a simulated run, computed after the fact from its event log (off by default).

Nothing here changes a run: :func:`energy_report` reads a finished
:class:`~simulator.engine.SimulationResult` (its ``start`` / ``finish`` / ``complete`` events),
the :class:`~workload.model.ClusterSpec` it ran on and a :class:`PowerModel` (watts per unit,
``power:`` in ``workload/calibration.yaml``, each number marked cited or assumed).

Accounting rule (idle baseline plus dynamic power, so nothing is counted twice):

- **Idle energy**: every computing unit of every node (each CPU core, each GPU) draws its
  ``idle_w`` over the whole span of the run (default: first to last logged event), whether or
  not anything ran on it. An idle node therefore adds idle energy and nothing else.
- **Busy (dynamic) energy**: while at least one stage runs on a unit (from its ``start`` to its
  ``finish`` event), the unit draws ``busy_w(f) - idle_w`` on top (a MIG slice of ``g`` of
  its GPU's ``n`` compute slices: ``g / n`` of that; :meth:`PowerModel.unit_share`), where
  ``busy_w(f)`` is its
  busy power at its frequency level ``f`` (default: its highest level). A GPU running several
  stages at once is busy once: over every stretch where ``k`` stages co-run, the dynamic energy
  of that stretch is split equally (``1/k`` each) among them, i.e. by time.
- **Per task**: the busy energy of its stages, plus an idle share: the run's whole idle energy
  split evenly over the tasks that completed (a task that did not complete gets no idle share;
  with no completed task the idle energy stays unassigned). Then the per-task totals add up to
  the run's total whenever every task that ran completed.

DVFS here only scales power: a unit at a lower level draws less, but its stages do not take
longer. Future work: stretch stage times by ``f_max / f`` inside the engine (speed proportional to
frequency) so that energy-versus-latency trade-offs can be simulated; kept out of the engine now
so existing results stay unchanged.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec
    >>> from simulator.engine import EventRecord
    >>> raw = {"gpu_models": {}, "power": {"dvfs_exponent": {"value": 3.0},
    ...        "cpu_core": {"idle_w": 2.0, "busy_w": 10.0, "frequencies_mhz": [2000],
    ...                     "source": "assumed", "idle_source": "assumed", "citation": "demo"},
    ...        "gpus": {}}}
    >>> events = [EventRecord(0.0, "decide", "t1", node="n1"),
    ...           EventRecord(1.0, "start", "t1", "s", "n1", "cpu:0"),
    ...           EventRecord(3.0, "finish", "t1", "s", "n1", "cpu:0"),
    ...           EventRecord(4.0, "complete", "t1", node="n1")]
    >>> report = energy_report(events, ClusterSpec((NodeSpec("n1", 1, 8),)),
    ...                        PowerModel.from_calibration(raw))
    >>> report.idle_j, report.busy_j, report.joules_per_completed_task   # 2*4, 8*2, 8+16
    (8.0, 16.0, 24.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workload.model import ClusterSpec, NodeSpec

__all__ = ["PowerSpec", "PowerModel", "EnergyInterval", "TaskEnergy", "EnergyReport",
           "energy_report", "task_busy_energy_j", "MAX_EVENTS", "MAX_UNIT_WATTS",
           "MAX_FREQUENCY_MHZ", "SOURCES"]

#: Most event records one report reads (a bound against runaway inputs, ~10x the paper run's).
MAX_EVENTS = 20_000_000
#: Highest power accepted for one unit (W): anything above is a unit error (mW, kW, a rack).
MAX_UNIT_WATTS = 5_000.0
#: Highest frequency level accepted (MHz): anything above is a unit error (Hz, kHz).
MAX_FREQUENCY_MHZ = 10_000.0
#: Most DVFS levels one unit may list.
MAX_LEVELS = 64
#: Allowed provenance marks of a power number.
SOURCES = ("cited", "measured", "assumed")


def _positive(value, where: str, upper: float) -> float:
    """A finite number in (0, upper]; bools and strings refused (YAML ``yes`` is not a watt)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value <= upper:
        raise ValueError(f"power: {where} must be a finite number in (0, {upper:g}], "
                         f"got {value!r}")
    return float(value)


@dataclass(frozen=True)
class PowerSpec:
    """Power of one kind of computing unit (one CPU core, or one GPU of a model).

    ``busy_w`` belongs to the highest of ``frequencies_mhz``; ``source`` marks ``busy_w`` and the
    clocks, ``idle_source`` marks ``idle_w`` (cited / measured / assumed).

    >>> PowerSpec("t4", 10.0, 70.0, (585.0, 1590.0)).dynamic_w(1590.0, 3.0)
    60.0
    """

    name: str
    idle_w: float
    busy_w: float
    frequencies_mhz: tuple[float, ...]
    source: str = "assumed"
    idle_source: str = "assumed"
    citation: str = ""

    @property
    def max_mhz(self) -> float:
        return self.frequencies_mhz[-1]

    def dynamic_w(self, frequency_mhz: float | None, dvfs_exponent: float) -> float:
        """Power above idle while busy at ``frequency_mhz`` (None: the highest level):
        ``(busy_w - idle_w) * (f / f_max) ** dvfs_exponent``. Only listed levels are accepted:
        a level the card cannot run is a configuration error, not something to interpolate."""
        f = self.max_mhz if frequency_mhz is None else frequency_mhz
        if f not in self.frequencies_mhz:
            raise ValueError(f"power: {self.name} has no frequency level {f!r} MHz; levels: "
                             f"{list(self.frequencies_mhz)}")
        return (self.busy_w - self.idle_w) * (f / self.max_mhz) ** dvfs_exponent

    @classmethod
    def parse(cls, name: str, entry, where: str = "") -> PowerSpec:
        """One ``power:`` entry, validated (every field finite and positive, busy >= idle);
        ``where`` prefixes the name in error messages (e.g. ``gpus.``)."""
        label = f"{where}{name}"
        if not isinstance(entry, Mapping):
            raise ValueError(f"power: {label} must be a mapping with idle_w, busy_w, "
                             f"frequencies_mhz, source, idle_source, citation; got {entry!r}")
        idle = _positive(entry.get("idle_w"), f"{label}.idle_w", MAX_UNIT_WATTS)
        busy = _positive(entry.get("busy_w"), f"{label}.busy_w", MAX_UNIT_WATTS)
        if busy < idle:
            raise ValueError(f"power: {label}.busy_w ({busy:g} W) is below its idle_w "
                             f"({idle:g} W)")
        levels = entry.get("frequencies_mhz")
        if not isinstance(levels, Sequence) or isinstance(levels, str) \
                or not 1 <= len(levels) <= MAX_LEVELS:
            raise ValueError(f"power: {label}.frequencies_mhz must list 1-{MAX_LEVELS} levels, "
                             f"got {levels!r}")
        parsed = tuple(_positive(f, f"{label}.frequencies_mhz[{i}]", MAX_FREQUENCY_MHZ)
                       for i, f in enumerate(levels))
        if any(b <= a for a, b in zip(parsed, parsed[1:])):
            raise ValueError(f"power: {label}.frequencies_mhz must be strictly ascending, "
                             f"got {list(parsed)}")
        marks = {k: entry.get(k) for k in ("source", "idle_source")}
        for key, mark in marks.items():
            if mark not in SOURCES:
                raise ValueError(f"power: {label}.{key} must be one of {SOURCES}, got {mark!r}")
        citation = entry.get("citation")
        if not isinstance(citation, str) or not citation.strip():
            raise ValueError(f"power: {label}.citation must say where the numbers come from")
        return cls(name, idle, busy, parsed, marks["source"], marks["idle_source"],
                   citation.strip())


@dataclass(frozen=True)
class PowerModel:
    """Watts of every kind of unit: one CPU core, and one GPU per calibrated model.

    Example::

        >>> from workload.estimates import load_calibration
        >>> power = PowerModel.from_calibration(load_calibration())
        >>> power.gpus["t4"].busy_w, power.dvfs_exponent
        (70.0, 3.0)
    """

    cpu_core: PowerSpec
    gpus: Mapping[str, PowerSpec]
    dvfs_exponent: float
    #: MIG-capable GPU model -> its compute slices (``mig.models`` in the calibration): a busy
    #: slice ``gpu:<i>/mig<j>:<g>g.<mem>`` draws ``g / slices`` of its GPU's dynamic power
    #: (simulator.mig: a slice's speed is that share of the GPU's SMs; the GPU's idle power is
    #: counted once, for the physical GPU).
    mig_slices: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_calibration(cls, calibration) -> PowerModel:
        """From a :class:`~workload.estimates.Calibration` (or its raw YAML mapping): the
        ``power:`` section, which must cover every model of ``gpu_models``."""
        raw = getattr(calibration, "raw", calibration)
        section = raw.get("power") if isinstance(raw, Mapping) else None
        if not isinstance(section, Mapping):
            raise ValueError("calibration has no power: section (see workload/calibration.yaml)")
        exponent = section.get("dvfs_exponent")
        exponent = exponent.get("value") if isinstance(exponent, Mapping) else exponent
        # Above ~4 the law stops being "cubic-ish" and a typo (30 for 3.0) would vanish power.
        exponent = _positive(exponent, "dvfs_exponent.value", 4.0)
        cpu = PowerSpec.parse("cpu_core", section.get("cpu_core"))
        gpus = section.get("gpus")
        if not isinstance(gpus, Mapping):
            raise ValueError(f"power: gpus must be a mapping of GPU model -> entry, got {gpus!r}")
        models = raw.get("gpu_models") or {}
        missing = sorted(set(models) - set(gpus))
        if missing:
            raise ValueError(f"power: gpus lacks the calibrated GPU models {missing}; every "
                             f"model in gpu_models needs idle/busy watts")
        parsed = {str(name): PowerSpec.parse(str(name), entry, "gpus.")
                  for name, entry in gpus.items()}
        mig = (raw.get("mig") or {}).get("models") or {}
        slices = {str(m): int(entry["compute_slices"]) for m, entry in mig.items()
                  if isinstance(entry, Mapping) and int(entry.get("compute_slices", 0)) > 0}
        return cls(cpu, parsed, exponent, slices)

    def unit_share(self, node: NodeSpec, unit_id: str) -> float:
        """The share of its device's dynamic power a busy unit draws: 1 for a core or a whole
        GPU, ``g / slices`` for a MIG slice ``gpu:<i>/mig<j>:<g>g.<memory>``."""
        device, _, slice_name = unit_id.partition("/")
        if not slice_name:
            return 1.0
        model = node.gpus[int(device.partition(":")[2])].model
        profile = slice_name.partition(":")[2]
        g = profile.partition("g.")[0]
        if model not in self.mig_slices or not g.isdigit() \
                or not 0 < int(g) <= self.mig_slices[model]:
            raise ValueError(f"energy: {unit_id!r} on node {node.node_id} is not a MIG slice "
                             f"of a calibrated MIG model ({sorted(self.mig_slices)})")
        return int(g) / self.mig_slices[model]

    def spec_for(self, node: NodeSpec, unit_id: str) -> PowerSpec:
        """The spec of unit ``unit_id`` (``cpu:<i>`` / ``gpu:<i>``, the engine's names; a MIG
        slice ``gpu:<i>/mig<j>:<profile>`` has its GPU's spec, see :meth:`unit_share`)."""
        kind, _, index = unit_id.partition("/")[0].partition(":")
        count = node.cpu_cores if kind == "cpu" else len(node.gpus) if kind == "gpu" else 0
        if not index.isdigit() or int(index) >= count:
            raise ValueError(f"energy: node {node.node_id} has no unit {unit_id!r} "
                             f"({node.cpu_cores} cores, {len(node.gpus)} GPUs)")
        if kind == "cpu":
            return self.cpu_core
        model = node.gpus[int(index)].model
        if model not in self.gpus:
            raise ValueError(f"energy: no power entry for GPU model {model!r} (node "
                             f"{node.node_id}); add it under power.gpus in calibration.yaml")
        return self.gpus[model]


@dataclass(frozen=True)
class EnergyInterval:
    """Energy drawn over ``[start_s, end_s]``, spread evenly over it (what carbon integrates).
    ``kind`` is ``busy`` (one task's share of a unit's dynamic power) or ``idle`` (one unit's
    idle power, ``task_id`` empty)."""

    start_s: float
    end_s: float
    joules: float
    kind: str
    node: str
    unit: str
    task_id: str = ""


@dataclass(frozen=True)
class TaskEnergy:
    busy_j: float
    idle_share_j: float
    completed: bool

    @property
    def total_j(self) -> float:
        return self.busy_j + self.idle_share_j


@dataclass(frozen=True)
class EnergyReport:
    """Joules of one run; see the module docstring for the accounting rule."""

    span_s: tuple[float, float]
    idle_j: float
    busy_j: float
    per_task: dict[str, TaskEnergy]
    per_node_j: dict[str, float]
    completed: tuple[str, ...]
    intervals: tuple[EnergyInterval, ...] = field(repr=False, default=())

    @property
    def total_j(self) -> float:
        return self.idle_j + self.busy_j

    @property
    def total_kwh(self) -> float:
        return self.total_j / 3.6e6

    @property
    def joules_per_completed_task(self) -> float | None:
        """The run's whole energy over its completed tasks; None when none completed."""
        return self.total_j / len(self.completed) if self.completed else None


def _busy_intervals(events, cluster: ClusterSpec, span: tuple[float, float]):
    """Per (node, unit): [(start, end, task_id)] of every stage that ran there, from paired
    ``start`` / ``finish`` events. A stage still running at the end of the log runs to the span's
    end (its unit was busy, its task did not complete)."""
    nodes = {n.node_id: n for n in cluster.nodes}
    open_runs: dict[tuple, float] = {}
    runs: dict[tuple[str, str], list] = {}
    for e in events:
        if e.kind not in ("start", "finish"):
            continue
        if e.node not in nodes:
            raise ValueError(f"energy: event at {e.time} names node {e.node!r}, not in the "
                             f"cluster {list(nodes)}")
        key = (e.task_id, e.stage, e.node, e.unit)
        if e.kind == "start":
            if key in open_runs:
                raise ValueError(f"energy: {e.task_id}/{e.stage} started twice on "
                                 f"{e.node}/{e.unit} without finishing")
            open_runs[key] = e.time
        else:
            if key not in open_runs:
                raise ValueError(f"energy: {e.task_id}/{e.stage} finished on {e.node}/{e.unit} "
                                 f"at {e.time} without a start")
            started = open_runs.pop(key)
            if e.time < started:
                raise ValueError(f"energy: {e.task_id}/{e.stage} finished at {e.time} before "
                                 f"it started at {started}")
            runs.setdefault((e.node, e.unit), []).append((started, e.time, e.task_id))
    for (task_id, _, node, unit), start in open_runs.items():
        runs.setdefault((node, unit), []).append((start, span[1], task_id))
    return runs


def _split_by_time(runs: list, dynamic_w: float, node: str, unit: str):
    """Sweep one unit's runs: over each stretch with ``k`` co-runners, each gets ``1/k`` of
    ``dynamic_w * stretch``. Yields one busy EnergyInterval per (stretch, co-runner); one pass
    over the sorted start/finish times, so a long run stays linear in its stages."""
    changes: dict[float, list[tuple[int, bool]]] = {}
    for index, (start, end, _) in enumerate(runs):
        changes.setdefault(start, []).append((index, True))
        changes.setdefault(end, []).append((index, False))
    active: dict[int, str] = {}  # insertion-ordered: the output order is deterministic
    previous = None
    for time in sorted(changes):
        if active and previous is not None and time > previous:
            for task in active.values():
                yield EnergyInterval(previous, time, dynamic_w * (time - previous) / len(active),
                                     "busy", node, unit, task)
        for index, starts in changes[time]:
            if starts:
                active[index] = runs[index][2]
            else:
                active.pop(index)
        previous = time


def task_busy_energy_j(node: NodeSpec, stage_runs: Sequence, power: PowerModel) -> float:
    """One task's busy (dynamic) joules from what its executor reports at completion:
    ``stage_runs`` of ``(stage, unit_id, busy_share_s)``, where ``busy_share_s`` is the stage's
    share of its unit's time (1/k over each stretch it ran with k stages on the unit), every
    unit at its highest clock. The same rule as :func:`energy_report`, so on a simulated run
    this equals its ``per_task[task].busy_j`` (tested); the idle share is not a task's own.

    >>> from workload.model import GpuSpec
    >>> from workload.estimates import load_calibration
    >>> node = NodeSpec("n1", 2, 16, gpus=(GpuSpec("t4", 16),))
    >>> power = PowerModel.from_calibration(load_calibration())
    >>> joules = task_busy_energy_j(node, [("decode", "cpu:0", 2.0), ("detect", "gpu:0", 1.0)],
    ...                             power)
    >>> round(joules, 2)          # 2 s x (14.17 - 4.25) W + 1 s x (70 - 10) W
    79.84
    """
    total = 0.0
    for _stage, unit_id, share_s in stage_runs:
        if not (isinstance(share_s, (int, float)) and math.isfinite(share_s) and share_s >= 0):
            raise ValueError(f"energy: stage time share {share_s!r} on {unit_id} must be a "
                             "finite number >= 0")
        spec = power.spec_for(node, unit_id)
        total += spec.dynamic_w(None, power.dvfs_exponent) * power.unit_share(node, unit_id) \
            * share_s
    return total


def energy_report(result, cluster: ClusterSpec, power: PowerModel,
                  frequency_mhz: Mapping[tuple[str, str], float] | None = None,
                  span_s: tuple[float, float] | None = None) -> EnergyReport:
    """Energy of a run from its event log.

    ``result``: a :class:`~simulator.engine.SimulationResult` (run with ``record_events=True``,
    the default) or its list of :class:`~simulator.engine.EventRecord`. ``frequency_mhz``: a
    DVFS level per ``(node_id, unit_id)`` (default: every unit at its highest level); it
    scales busy power only. ``span_s``: the (start, end) over which units draw idle power
    (default: first to last logged event); it must contain every logged event.
    """
    events = getattr(result, "events", result)
    if not isinstance(events, Sequence) or not events:
        raise ValueError("energy: the run has no event log (run with record_events=True)")
    if len(events) > MAX_EVENTS:
        raise ValueError(f"energy: {len(events)} events exceed MAX_EVENTS={MAX_EVENTS}")
    times = [e.time for e in events]
    if not all(isinstance(t, (int, float)) and math.isfinite(t) for t in times):
        raise ValueError("energy: every event time must be a finite number")
    first, last = min(times), max(times)
    if span_s is None:
        span_s = (first, last)
    start, end = (float(x) for x in span_s)
    if not (math.isfinite(start) and math.isfinite(end) and start <= first and last <= end):
        raise ValueError(f"energy: span_s {span_s!r} must be finite and contain every event "
                         f"({first} .. {last})")
    nodes = {n.node_id: n for n in cluster.nodes}
    frequency_mhz = dict(frequency_mhz or {})
    for node_id, unit in frequency_mhz:
        if node_id not in nodes:
            raise ValueError(f"energy: frequency given for unknown node {node_id!r}")
        power.spec_for(nodes[node_id], unit)  # refuses an unknown unit
    runs = _busy_intervals(events, cluster, (start, end))
    intervals: list[EnergyInterval] = []
    for (node_id, unit), unit_runs in sorted(runs.items()):
        spec = power.spec_for(nodes[node_id], unit)
        dynamic = spec.dynamic_w(frequency_mhz.get((node_id, unit)), power.dvfs_exponent) \
            * power.unit_share(nodes[node_id], unit)
        intervals.extend(_split_by_time(unit_runs, dynamic, node_id, unit))
    for node in cluster.nodes:
        units = [f"cpu:{i}" for i in range(node.cpu_cores)] + \
                [f"gpu:{i}" for i in range(len(node.gpus))]
        for unit in units:
            idle = power.spec_for(node, unit).idle_w * (end - start)
            intervals.append(EnergyInterval(start, end, idle, "idle", node.node_id, unit))
    completed = tuple(dict.fromkeys(e.task_id for e in events if e.kind == "complete"))
    idle_j = sum(i.joules for i in intervals if i.kind == "idle")
    busy_by_task: dict[str, float] = {}
    per_node: dict[str, float] = {n: 0.0 for n in nodes}
    for i in intervals:
        per_node[i.node] += i.joules
        if i.kind == "busy":
            busy_by_task[i.task_id] = busy_by_task.get(i.task_id, 0.0) + i.joules
    share = idle_j / len(completed) if completed else 0.0
    done = set(completed)
    per_task = {t: TaskEnergy(busy_by_task.get(t, 0.0), share if t in done else 0.0, t in done)
                for t in dict.fromkeys([*busy_by_task, *completed])}
    return EnergyReport((start, end), idle_j, sum(busy_by_task.values()), per_task, per_node,
                        completed, tuple(intervals))
