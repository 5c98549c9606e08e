"""MIG slices and stage batching in the simulator: both axes off by default.

**MIG (Multi-Instance GPU).** A node whose GPUs are MIG-capable (``mig:`` in
``workload/calibration.yaml``, e.g. the A100 40 GB) may carry a label
``mig=<profile>,<profile>,...`` (the way ``rack=<name>`` labels place nodes in racks): every GPU
of that node is then partitioned so, and the simulator exposes each slice as its own computing
unit (``gpu:<i>/mig<j>:<profile>``, ``ComputingUnit.mig_profile`` set) instead of the whole GPU:

- its speed is the GPU's spec speed times ``g / compute_slices`` (a stage on a g-slice takes the
  whole-GPU time over ``g / 7`` on an A100: linear in the slice's SMs, ASSUMPTION in the
  calibration), so ``CostModel.unit_ms`` and the true times need no MIG code at all;
- its memory is the profile's (``3g.20gb``: 20 GB); stages that do not fit fail with
  out-of-memory exactly as on a whole GPU;
- slices never slow each other down (MIG isolates SMs, L2 and memory: cited); stages inside one
  slice co-run as on the whole GPU (the model's measured co-location rates);
- utilisation counts a busy slice as ``g / compute_slices`` of a busy GPU.

A partition must name known profiles of that model, no profile more often than the GPU holds
it, and fit the GPU's compute slices and memory: :func:`parse_partition` raises ``ValueError``
saying which rule broke. Schedulers that know nothing of MIG simply see more, smaller GPUs.
Without a ``mig=`` label nothing changes (the same units, the same event log).

**Batching.** A node scheduler that sets an integer attribute ``max_batch`` >= 2 (ElasticBatch
does) turns it on: ``n`` stages of ONE stage type running together on one GPU unit (whole GPU
or slice) form a batch, and each member progresses at :func:`batch_rate` ``(n, beta)``, so a
batch of equal members finishes after ``t(1) * (1 + beta (n - 1))`` (``batching.beta`` in the
calibration, assumed). This reuses the engine's co-run mechanics (several stages on one unit,
each at a rate): only the rate of a same-type group changes, memory is the members' sum as for
co-runners, and a GPU unit may hold up to ``max_batch`` stages of one type (mixed types still at
most ``gpu_max_corun``). A member that finishes early (per-task noise) leaves the rest a
smaller, faster batch: the processor-sharing approximation the engine uses for co-runners.

Example::

    >>> from workload.estimates import load_calibration
    >>> catalog = MigCatalog.from_calibration(load_calibration())
    >>> [p.name for p in parse_partition("a100", "3g.20gb,2g.10gb,1g.5gb,1g.5gb", catalog)]
    ['3g.20gb', '2g.10gb', '1g.5gb', '1g.5gb']
    >>> round(batch_rate(8, 0.25), 4)   # each of 8 members at 1/2.75 of its alone speed
    0.3636
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from workload.estimates import Calibration, CostModel, gpu_spec_speed
from workload.model import ComputingUnit, NodeSpec

__all__ = ["MigProfile", "MigCatalog", "MIG_LABEL", "node_partition", "parse_partition",
           "slice_units", "batch_rate", "batch_beta"]

#: The node label that partitions a node's GPUs: ``mig=3g.20gb,2g.10gb,1g.5gb,1g.5gb``.
MIG_LABEL = "mig="


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile: ``compute_slices`` of the GPU's ``total_slices``."""

    model: str
    name: str
    compute_slices: int
    total_slices: int
    memory_gb: float
    max_count: int

    @property
    def compute_fraction(self) -> float:
        return self.compute_slices / self.total_slices


@dataclass(frozen=True)
class MigCatalog:
    """The MIG-capable GPU models and their profiles (``mig.models`` in the calibration)."""

    profiles: dict[str, dict[str, MigProfile]]

    @classmethod
    def from_calibration(cls, calibration: Calibration) -> MigCatalog:
        section = (calibration.raw.get("mig") or {}).get("models") or {}
        out: dict[str, dict[str, MigProfile]] = {}
        for model, entry in section.items():
            total = int(entry["compute_slices"])
            out[model] = {name: MigProfile(model, name, int(p["compute_slices"]), total,
                                           float(p["memory_gb"]), int(p["max_count"]))
                          for name, p in entry["profiles"].items()}
        return cls(out)

    def is_capable(self, model: str) -> bool:
        return model in self.profiles

    def profile(self, model: str, name: str) -> MigProfile:
        """The profile ``name`` of ``model``; ValueError naming the known ones otherwise."""
        if model not in self.profiles:
            raise ValueError(f"GPU model {model!r} is not MIG-capable; MIG models in the "
                             f"calibration: {sorted(self.profiles) or 'none'}")
        known = self.profiles[model]
        if name not in known:
            raise ValueError(f"unknown MIG profile {name!r} for {model}; known: "
                             f"{', '.join(known)}")
        return known[name]


def node_partition(spec: NodeSpec) -> str | None:
    """The node's ``mig=`` label value, None without one (two labels: ValueError)."""
    values = [label[len(MIG_LABEL):] for label in spec.labels if label.startswith(MIG_LABEL)]
    if len(values) > 1:
        raise ValueError(f"{spec.node_id}: more than one {MIG_LABEL!r} label: {values}")
    return values[0] if values else None


def parse_partition(model: str, text: str, catalog: MigCatalog,
                    memory_gb: float | None = None) -> list[MigProfile]:
    """The profiles of a partition ``"3g.20gb,2g.10gb,..."`` of one ``model`` GPU, checked:
    known profiles, each within its most instances, the sum of compute slices within the GPU's
    and the sum of memory within ``memory_gb`` (the GPU's; None: the largest profile's)."""
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else []
    if not names or not all(names):
        raise ValueError(f"MIG partition {text!r} must be profile names separated by commas, "
                         f"e.g. '3g.20gb,2g.10gb,1g.5gb,1g.5gb'")
    profiles = [catalog.profile(model, n) for n in names]
    for name, count in Counter(names).items():
        most = catalog.profile(model, name).max_count
        if count > most:
            raise ValueError(f"MIG partition {text!r}: {count} x {name}, but one {model} holds "
                             f"at most {most}")
    total = profiles[0].total_slices
    used = sum(p.compute_slices for p in profiles)
    if used > total:
        raise ValueError(f"MIG partition {text!r} uses {used} compute slices; a {model} has "
                         f"{total}")
    limit = memory_gb if memory_gb is not None else \
        max(p.memory_gb for p in catalog.profiles[model].values())
    memory = sum(p.memory_gb for p in profiles)
    if memory > limit + 1e-9:
        raise ValueError(f"MIG partition {text!r} needs {memory:g} GB; the {model} has "
                         f"{limit:g} GB")
    return profiles


def slice_units(spec: NodeSpec, costs: CostModel, gpu_max_corun: int
                ) -> list[tuple[ComputingUnit, float, float]] | None:
    """The GPU units of a partitioned node as (view, memory MB, compute fraction) per slice, in
    GPU then slice order; None when the node has no ``mig=`` label (whole GPUs as before)."""
    text = node_partition(spec)
    if text is None:
        return None
    catalog = MigCatalog.from_calibration(costs.calibration)
    if not spec.gpus:
        raise ValueError(f"{spec.node_id}: a {MIG_LABEL!r} label needs GPUs to partition")
    units = []
    for i, gpu in enumerate(spec.gpus):
        profiles = parse_partition(gpu.model, text, catalog, gpu.memory_gb)
        speed = gpu_spec_speed(gpu, costs.calibration)
        for j, p in enumerate(profiles):
            view = ComputingUnit(f"gpu:{i}/mig{j}:{p.name}", "gpu",
                                 speed=speed * p.compute_fraction, model=gpu.model,
                                 capacity=gpu_max_corun, mig_profile=p.name)
            units.append((view, p.memory_gb * 1024, p.compute_fraction))
    return units


def batch_rate(n: int, beta: float) -> float:
    """Progress rate of each member of an ``n``-stage batch: ``1 / (1 + beta (n - 1))``."""
    return 1.0 / (1.0 + beta * (n - 1))


def batch_beta(calibration: Calibration) -> float:
    """``batching.beta.value`` of the calibration, checked to lie in (0, 1]."""
    entry = (calibration.raw.get("batching") or {}).get("beta")
    value = entry.get("value") if isinstance(entry, dict) else entry
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value <= 1:
        raise ValueError(f"calibration batching.beta must be a number in (0, 1], got {value!r}")
    return float(value)
