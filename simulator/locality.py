"""Model locality for the simulator: a cold start costs load time (OFF unless configured).

A node can only run a task of application A once A's model (weights, compiled operators) is
loaded there. ``SimulationConfig.locality = LocalityConfig(...)`` turns this on; with the default
``None`` the engine never calls into this module and every run is exactly as before.

When a task's input has arrived at its node, the engine asks :meth:`WarmSet.acquire` how long the
task must wait before its first stages become ready:

- **same node** (A is warm there: a task of A is at the node now, or the last one left less than
  ``warm_ttl_s`` ago): nothing, or the rest of a load another task of A already started there
  (it joins that load rather than loading twice);
- **same link** (cold here, but another node with the same rack label has A loaded):
  ``cold_local_ms``, the weights are copied from that peer;
- **anywhere** (no node of the rack has it): ``cold_remote_ms``, fetched from the model store.

Racks come from ``NodeSpec.labels`` entries ``rack=<name>``; a node without one is its own rack.
The load is a pure delay of that task (its node's units keep serving other tasks meanwhile), and
the engine logs it as ``model_load_wait`` / ``model_load_rack`` / ``model_load_store``. Policies
see nothing of this in ``NodeState``: they must learn warmth from their own decisions.

The three numbers are ASSUMPTIONS (no measurement in this repository): a few hundred MB of
detector / encoder weights read from a shared store at a fraction of a Gigabit link plus
framework start-up (~8 s), or copied from a rack peer's page cache (~2 s); a model stays
resident a minute after its last task, as serving systems keep idle models for a grace period.

Example::

    >>> from workload.model import ClusterSpec, NodeSpec
    >>> cluster = ClusterSpec((NodeSpec("a", 4, 16, labels=("rack=r1",)),
    ...                        NodeSpec("b", 4, 16, labels=("rack=r1",)), NodeSpec("c", 4, 16)))
    >>> warm = WarmSet(LocalityConfig(warm_ttl_s=60, cold_local_ms=2000, cold_remote_ms=8000),
    ...                cluster)
    >>> warm.acquire("a", "video_synopsis", 0.0)    # nothing loaded anywhere: model store
    (8.0, 'store')
    >>> warm.acquire("b", "video_synopsis", 9.0)    # a has it loaded, same rack: from the peer
    (2.0, 'rack')
    >>> warm.acquire("a", "video_synopsis", 10.0)   # warm on a itself
    (0.0, 'node')
    >>> warm.acquire("c", "video_synopsis", 10.0)   # c's rack is c alone
    (8.0, 'store')
"""

from __future__ import annotations

from dataclasses import dataclass

from workload.model import ClusterSpec, NodeSpec

__all__ = ["LocalityConfig", "WarmSet", "rack_of", "RACK_LABEL"]

#: Label prefix that names a node's rack (``rack=r1``).
RACK_LABEL = "rack="


def rack_of(node: NodeSpec) -> str:
    """The node's rack name: its first ``rack=<name>`` label, else a rack of its own."""
    for label in node.labels:
        if label.startswith(RACK_LABEL) and len(label) > len(RACK_LABEL):
            return label[len(RACK_LABEL):]
    return f"node:{node.node_id}"  # cannot clash with a label name: those carry no "node:"


@dataclass(frozen=True)
class LocalityConfig:
    """Cold-start costs of a task whose application's model is not loaded on its node."""

    warm_ttl_s: float = 60.0        # a model stays loaded this long after its last task left
    cold_local_ms: float = 2000.0   # load from a rack peer that has it ("same link")
    cold_remote_ms: float = 8000.0  # load from the model store ("anywhere")

    def __post_init__(self) -> None:
        for name in ("warm_ttl_s", "cold_local_ms", "cold_remote_ms"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value != value or value < 0:
                raise ValueError(f"LocalityConfig.{name} must be a number >= 0, got {value!r}")
        if self.cold_local_ms > self.cold_remote_ms:
            raise ValueError(f"cold_local_ms ({self.cold_local_ms}) must not exceed "
                             f"cold_remote_ms ({self.cold_remote_ms}): a peer is never farther "
                             "than the model store")


@dataclass
class _Model:
    ready_s: float      # when the load finishes (in the past once loaded)
    active: int = 0     # tasks of the app at the node since their input arrived
    last_used_s: float = 0.0


class WarmSet:
    """Which application models are loaded on which node, as the simulated cluster has them."""

    def __init__(self, config: LocalityConfig, cluster: ClusterSpec) -> None:
        self.config = config
        self.rack = {n.node_id: rack_of(n) for n in cluster.nodes}
        self._racks: dict[str, list[str]] = {}
        for node in cluster.nodes:  # cluster order: peers are searched deterministically
            self._racks.setdefault(self.rack[node.node_id], []).append(node.node_id)
        self._models: dict[tuple[str, str], _Model] = {}

    def is_warm(self, node_id: str, app_id: str, now_s: float) -> bool:
        """A has a task at the node, or its last one left at most ``warm_ttl_s`` ago (a load in
        progress counts: its task is at the node)."""
        model = self._models.get((node_id, app_id))
        return model is not None and (model.active > 0 or
                                      now_s - model.last_used_s <= self.config.warm_ttl_s)

    def _peer_has_it(self, node_id: str, app_id: str, now_s: float) -> bool:
        # A peer still loading has no weights to copy yet, so only finished loads count.
        return any(peer != node_id and self.is_warm(peer, app_id, now_s)
                   and self._models[(peer, app_id)].ready_s <= now_s
                   for peer in self._racks[self.rack[node_id]])

    def acquire(self, node_id: str, app_id: str, now_s: float) -> tuple[float, str]:
        """A task of ``app_id`` is ready to start at the node: (seconds it waits for the model,
        where the model came from: ``node``, ``rack`` or ``store``). Counts the task as using
        the model until :meth:`release`."""
        key = (node_id, app_id)
        if self.is_warm(node_id, app_id, now_s):
            model = self._models[key]
            model.active += 1
            model.last_used_s = max(model.last_used_s, now_s)
            return max(0.0, model.ready_s - now_s), "node"
        if self._peer_has_it(node_id, app_id, now_s):
            delay, source = self.config.cold_local_ms / 1000.0, "rack"
        else:
            delay, source = self.config.cold_remote_ms / 1000.0, "store"
        self._models[key] = _Model(now_s + delay, 1, now_s)
        return delay, source

    def release(self, node_id: str, app_id: str, now_s: float) -> None:
        """A task of ``app_id`` left the node (completed): the model's idle timer restarts."""
        model = self._models.get((node_id, app_id))
        if model is None or model.active <= 0:
            raise ValueError(f"release of {app_id} on {node_id} without a matching acquire")
        model.active -= 1
        model.last_used_s = max(model.last_used_s, now_s)
