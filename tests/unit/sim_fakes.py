"""Small hand-written policies and node schedulers for the simulator's tests: what a test needs
when the placement itself is not under test (imported by basename, like ``flink_fakes``)."""

from __future__ import annotations

from workload.model import Assignment, Decision, NodeScheduler, Policy


class Route(Policy):
    """Sends each task to the node its id names in ``routes`` (round-robin for the rest)."""

    name = "route"

    def __init__(self, routes=None):
        self.routes, self.turn = routes or {}, 0

    def decide(self, observation):
        node = self.routes.get(observation.task.task_id)
        if node is None:
            self.turn += 1
            node = observation.node_ids[self.turn % len(observation.node_ids)]
        return Decision(node, "routed")


class FirstFit(NodeScheduler):
    """Ready order, first unit with room that can run the stage; ``gpus_first``: GPUs are
    tried before cores (else the units' own order)."""

    name = "first-fit"

    def __init__(self, gpus_first: bool = True):
        self.gpus_first = gpus_first

    def assign(self, ready, units, now_s):
        room = {u.unit_id: u.capacity - len(u.running) for u in units}
        order = sorted(units, key=lambda u: u.kind != "gpu") if self.gpus_first else list(units)
        out = []
        for stage in ready:
            for unit in order:
                if room[unit.unit_id] > 0 and (unit.kind == "cpu" or stage.gpu_capable):
                    room[unit.unit_id] -= 1
                    out.append(Assignment(stage, unit.unit_id, "first fit"))
                    break
        return out
