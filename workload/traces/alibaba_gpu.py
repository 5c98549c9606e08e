"""Alibaba cluster-trace-gpu-v2023: heterogeneous node inventory and GPU-sharing pods.

Files (under ``<data dir>/alibaba-gpu-v2023/``):

- ``openb_node_list_all_node.csv`` (1,523 nodes, 310 CPU-only) and
  ``openb_node_list_gpu_node.csv`` (1,213 GPU nodes): ``sn, cpu_milli, memory_mib, gpu, model``.
- ``openb_pod_list_{default,gpushare100,gpuspec33}.csv`` (8,152 pods each): ``name, cpu_milli,
  memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time,
  scheduled_time``.

Example::

    >>> from workload.traces import load_or_generate_nodes, sample_nodes
    >>> nodes = load_or_generate_nodes()               # real file if present, else generated
    >>> cluster = sample_nodes(nodes, 16, seed=0)      # 16 nodes, every GPU model represented
    >>> len(cluster)
    16
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

from ._parse import read_csv
from .datadir import DataSource, find_data_file, load_or_generate
from .records import NodeInventory, NodeTable, PodRecord, PodTrace

__all__ = [
    "ALIBABA_GPU",
    "NODE_FILES",
    "POD_VARIANTS",
    "NodeInventory",
    "NodeTable",
    "PodRecord",
    "PodTrace",
    "load_alibaba_nodes",
    "load_alibaba_pods",
    "load_or_generate_nodes",
    "load_or_generate_pods",
    "pod_arrivals",
    "read_nodes",
    "read_pods",
    "sample_nodes",
]

ALIBABA_GPU = DataSource(
    folder="alibaba-gpu-v2023",
    title="Alibaba cluster-trace-gpu-v2023",
    url="https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2023",
    license="research/study use, cite Weng et al., USENIX ATC 2023",
)

#: ``which`` argument of :func:`load_alibaba_nodes` -> file name.
NODE_FILES = {"all": "openb_node_list_all_node.csv", "gpu": "openb_node_list_gpu_node.csv"}
#: ``variant`` argument of :func:`load_alibaba_pods`; the file is ``openb_pod_list_<variant>.csv``.
POD_VARIANTS = ("default", "gpushare100", "gpuspec33")

_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                "pod_phase", "creation_time", "deletion_time", "scheduled_time")

# Upper bounds of the numeric columns, far above the real files' maxima (in brackets): a value
# beyond them is a unit error or corruption, not a machine.
#: CPU of a node or pod in milli-cores: 1,024 cores [128 cores].
MAX_CPU_MILLI = 1_024_000
#: Memory in MiB: 1 PiB [1 TiB node, 720 GiB pod].
MAX_MEMORY_MIB = 2**30
#: GPUs on one node or requested by one pod [8].
MAX_GPUS = 64
#: Pod times in seconds on the trace clock: ten years [149 days].
MAX_POD_TIME_S = 10 * 365 * 86400


def read_nodes(path: str | Path) -> NodeTable:
    """Read a node-list CSV of the v2023 format from an explicit path.

    An empty ``model`` means a CPU-only node and must come with ``gpu == 0`` (and vice versa),
    which also catches shifted columns.

    Example::

        >>> # read_nodes("/work/shared/data/alibaba-gpu-v2023/openb_node_list_gpu_node.csv")
    """
    nodes = []
    seen: set[str] = set()
    for row in read_csv(path, _NODE_COLUMNS):
        name = row.text("sn")
        if name in seen:
            raise row.error(f"duplicate node name {name!r}")
        seen.add(name)
        gpus = row.integer("gpu", min_value=0, max_value=MAX_GPUS)
        model = row.text("model", optional=True) or ""
        if (gpus > 0) != (model != ""):
            raise row.error(f"gpu count {gpus} does not match GPU model {model!r}")
        nodes.append(NodeInventory(
            name=name, cpu_milli=row.integer("cpu_milli", min_value=0, max_value=MAX_CPU_MILLI),
            memory_mib=row.integer("memory_mib", min_value=0, max_value=MAX_MEMORY_MIB),
            gpu_count=gpus, gpu_model=model))
    return NodeTable(tuple(nodes), source=str(path))


def load_alibaba_nodes(data_dir: str | Path | None = None, *, which: str = "all") -> NodeTable:
    """The Alibaba v2023 node inventory (``which="all"``: 1,523 nodes; ``"gpu"``: 1,213).

    Raises :class:`~workload.traces.datadir.DataNotFound` when the file is missing.

    Example::

        >>> nodes = load_alibaba_nodes()                          # doctest: +SKIP
        >>> nodes.model_counts()["T4"]                            # doctest: +SKIP
        404
    """
    if which not in NODE_FILES:
        raise ValueError(f"which must be one of {sorted(NODE_FILES)}, got {which!r}")
    return read_nodes(find_data_file(ALIBABA_GPU, NODE_FILES[which], data_dir))


def read_pods(path: str | Path) -> PodTrace:
    """Read a pod-list CSV of the v2023 format from an explicit path, sorted by creation time.

    Empty ``scheduled_time`` (pending pods) and ``deletion_time`` become ``None``; empty
    ``gpu_spec`` becomes ``()`` (any GPU model); ``"V100M16|V100M32"`` becomes a tuple.

    Example::

        >>> # read_pods(".../openb_pod_list_default.csv").arrivals()[:3] -> [0.0, 427061.0, ...]
    """
    pods = []
    for row in read_csv(path, _POD_COLUMNS):
        num_gpu = row.integer("num_gpu", min_value=0, max_value=MAX_GPUS)
        # Parsed loosely here so that a share above one GPU gets its own message just below.
        gpu_milli = row.integer("gpu_milli", min_value=0, max_value=MAX_CPU_MILLI)
        if gpu_milli > 1000:
            raise row.error(f"gpu_milli {gpu_milli} exceeds one GPU (1000)")
        if (num_gpu == 0) != (gpu_milli == 0):
            raise row.error(f"num_gpu {num_gpu} does not match gpu_milli {gpu_milli}")
        created = row.integer("creation_time", min_value=0, max_value=MAX_POD_TIME_S)
        deleted = row.integer("deletion_time", optional=True, min_value=0,
                              max_value=MAX_POD_TIME_S)
        scheduled = row.integer("scheduled_time", optional=True, min_value=0,
                                max_value=MAX_POD_TIME_S)
        if deleted is not None and deleted < created:
            raise row.error(f"deletion_time {deleted} precedes creation_time {created}")
        if scheduled is not None and scheduled < created:
            raise row.error(f"scheduled_time {scheduled} precedes creation_time {created}")
        spec = row.text("gpu_spec", optional=True)
        pods.append(PodRecord(
            name=row.text("name"),
            cpu_milli=row.integer("cpu_milli", min_value=0, max_value=MAX_CPU_MILLI),
            memory_mib=row.integer("memory_mib", min_value=0, max_value=MAX_MEMORY_MIB),
            num_gpu=num_gpu,
            gpu_milli=gpu_milli, gpu_spec=tuple(spec.split("|")) if spec else (),
            qos=row.text("qos"), phase=row.text("pod_phase"), creation_s=created,
            deletion_s=deleted, scheduled_s=scheduled,
        ))
    pods.sort(key=lambda p: p.creation_s)  # stable: file order among equal times
    return PodTrace(tuple(pods), source=str(path))


def load_alibaba_pods(data_dir: str | Path | None = None, *, variant: str = "default") -> PodTrace:
    """The Alibaba v2023 pods (8,152) of one variant: ``default``, ``gpushare100``, ``gpuspec33``.

    Example::

        >>> pods = load_alibaba_pods()                            # doctest: +SKIP
        >>> sum(p.fractional_gpu for p in pods)                   # doctest: +SKIP
        3078
    """
    if variant not in POD_VARIANTS:
        raise ValueError(f"variant must be one of {POD_VARIANTS}, got {variant!r}")
    return read_pods(find_data_file(ALIBABA_GPU, f"openb_pod_list_{variant}.csv", data_dir))


def pod_arrivals(pods: PodTrace | Iterable[PodRecord]) -> list[float]:
    """Sorted pod creation times in seconds from the first one (the cluster's arrival process).

    Example::

        >>> p = lambda t: PodRecord("p", 0, 0, 0, 0, (), "BE", "Running", t, None, None)
        >>> pod_arrivals([p(50), p(20), p(35)])
        [0.0, 15.0, 30.0]
    """
    pods = pods if isinstance(pods, PodTrace) else PodTrace(tuple(pods), source="")
    return pods.arrivals()


def sample_nodes(nodes: NodeTable | Iterable[NodeInventory], m: int, seed: int = 0, *,
                 include_cpu_only: bool = True) -> list[NodeInventory]:
    """Pick ``m`` distinct nodes, stratified by GPU model, deterministically for ``seed``.

    Each model gets a share of ``m`` proportional to its node count (largest remainder); when
    ``m`` is at least the number of models every model gets at least one node, so rare GPUs
    (e.g. Alibaba's two A10 nodes) still make the cluster heterogeneous. The result is in the
    inventory's order.

    Example::

        >>> from workload.traces import generate_nodes
        >>> picked = sample_nodes(generate_nodes(200, seed=3), 10, seed=7)
        >>> len(picked), len({n.name for n in picked})
        (10, 10)
    """
    pool = [n for n in nodes if include_cpu_only or n.has_gpu]
    if not 0 <= m <= len(pool):
        raise ValueError(f"cannot sample {m} nodes from {len(pool)}")
    strata: dict[str, list[int]] = {}
    for index, node in enumerate(pool):
        strata.setdefault(node.gpu_model, []).append(index)
    quotas = _stratum_quotas({model: len(ix) for model, ix in strata.items()}, m)
    rng = random.Random(seed)
    chosen: list[int] = []
    for model in sorted(strata):  # fixed order keeps the draw deterministic
        chosen.extend(rng.sample(strata[model], quotas[model]))
    return [pool[i] for i in sorted(chosen)]


def _stratum_quotas(sizes: dict[str, int], m: int) -> dict[str, int]:
    quotas = {k: (1 if m >= len(sizes) else 0) for k in sizes}
    remaining = m - sum(quotas.values())
    spare = {k: sizes[k] - quotas[k] for k in sizes}
    total = sum(spare.values())
    if remaining and total:
        ideal = {k: remaining * spare[k] / total for k in sizes}
        for k in sizes:
            quotas[k] += int(ideal[k])
        # Hand out what flooring left over, largest fractional part first (ties by name).
        order = sorted(sizes, key=lambda k: (-(ideal[k] - int(ideal[k])), k))
        left = m - sum(quotas.values())
        while left:
            for k in order:
                if left and quotas[k] < sizes[k]:
                    quotas[k] += 1
                    left -= 1
    return quotas


def load_or_generate_nodes(data_dir: str | Path | None = None, *, which: str = "all",
                           seed: int = 0, n_nodes: int | None = None) -> NodeTable:
    """:func:`load_alibaba_nodes`, or a generated inventory of the same shape if it is missing.

    ``n_nodes`` defaults to the real file's size (1,523 for ``all``, 1,213 for ``gpu``).

    Example::

        >>> load_or_generate_nodes("/nonexistent", n_nodes=5).source.startswith("generated")
        True
    """
    from .generators import generate_nodes

    size = n_nodes if n_nodes is not None else (1523 if which == "all" else 1213)
    return load_or_generate(
        lambda: load_alibaba_nodes(data_dir, which=which),
        lambda: generate_nodes(size, seed=seed, cpu_only=(which == "all")),
    )


def load_or_generate_pods(data_dir: str | Path | None = None, *, variant: str = "default",
                          seed: int = 0, n_pods: int = 8152) -> PodTrace:
    """:func:`load_alibaba_pods`, or generated pods of the same shape if the file is missing.

    Example::

        >>> len(load_or_generate_pods("/nonexistent", n_pods=20))
        20
    """
    from .generators import generate_pods

    return load_or_generate(lambda: load_alibaba_pods(data_dir, variant=variant),
                            lambda: generate_pods(n_pods, seed=seed))
