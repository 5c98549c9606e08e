"""The cross-node stage placement axis: a task's stages on several nodes (OFF unless a policy
asks for it).

A policy normally places a whole task on one node. With ``Decision.stage_nodes`` (a node per
stage name) it may split it; the engine then hands the task to :class:`StageSplit`:

- the task's input crosses the downlink of ``Decision.node`` (the home node, which must host the
  application's first stage), as for a whole task; an entry stage placed on another node gets
  the input forwarded from the home node;
- the task has one *part* per node it spans (a ``TaskState`` holding that node's stages only),
  so each node's queue depth and backlog count what really waits there;
- when a stage finishes and a consumer of its output sits on another node, the output (bytes
  from ``workload.stage_output``: the calibration's measured or assumed fraction of the task's
  input bytes) moves over the source node's uplink and the destination's downlink at once, each
  link shared with its other transfers (``simulator.links``, processor sharing); the consumer
  becomes ready there only when both halves are over, so alone on idle links the transfer takes
  ``bytes / min(uplink of the source, downlink of the destination)``;
- a part whose stages are all done leaves its node; the node that finishes the task's last stage
  uploads the result, and the engine completes the task as before.

Off by default: with ``stage_nodes`` None, or every stage on ``Decision.node``, the engine never
calls into this module (the event log is the same, event for event). The split path logs
``output_sent`` (stage: the producer, node: the source, unit: the destination) and
``output_received`` (node: the destination); the input counts as producer ``input``.

Not modelled: a split task with the locality axis on (refused: a model would have to load on
every node of the split), and contention between the two halves of one transfer (each link
shares itself alone, so a busy downlink does not slow the sender's uplink).
"""

from __future__ import annotations

from workload.catalog import APPLICATIONS
from workload.model import Decision, Task
from workload.stage_output import stage_output_bytes, stage_output_fractions

from simulator.events import EventQueue
from simulator.links import LinkTransfers
from simulator.runtime import Node, TaskState
from simulator.utilisation import UtilisationMeter

__all__ = ["StageSplit", "INPUT", "check_stage_nodes"]

#: Producer name of the task's input when it is forwarded to an entry stage on another node.
INPUT = "input"


def check_stage_nodes(task: Task, decision: Decision, node_ids) -> bool:
    """Whether ``decision`` splits ``task`` over nodes (False: the whole task on
    ``decision.node``, as without the axis). A bad ``stage_nodes`` raises ValueError."""
    if decision.stage_nodes is None:
        return False
    app = APPLICATIONS[task.app_id]
    names = [s.name for s in app.stages]
    if not isinstance(decision.stage_nodes, dict) or set(decision.stage_nodes) != set(names):
        given = sorted(decision.stage_nodes) if isinstance(decision.stage_nodes, dict) else \
            type(decision.stage_nodes).__name__
        raise ValueError(f"stage_nodes of task {task.task_id} must name a node for every stage "
                         f"of {task.app_id} {names}, got {given}")
    unknown = sorted({n for n in decision.stage_nodes.values() if n not in node_ids})
    if unknown:
        raise ValueError(f"stage_nodes of task {task.task_id} name {unknown}, not nodes of this "
                         f"cluster ({list(node_ids)})")
    if decision.stage_nodes[names[0]] != decision.node:
        raise ValueError(f"task {task.task_id}: the first stage {names[0]!r} must run on the "
                         f"decision's node {decision.node!r} (its input goes there), not on "
                         f"{decision.stage_nodes[names[0]]!r}")
    return any(n != decision.node for n in decision.stage_nodes.values())


class StageSplit:
    """The split tasks of one run: their parts on nodes and the transfers between them."""

    def __init__(self, queue: EventQueue, nodes: dict[str, Node], meter: UtilisationMeter,
                 links: LinkTransfers, stages, costs, truth_best_s, calibration):
        self.queue, self.nodes, self.meter, self.links = queue, nodes, meter, links
        self.stages = stages          # simulator.node_runtime.StageRunner
        self.costs = costs
        self._true_best_s = truth_best_s
        self.fractions = stage_output_fractions(calibration)
        self._left: dict[str, int] = {}         # task id -> stages not yet finished
        self._first_start: dict[str, float] = {}  # task id -> earliest stage start (parts gone)
        self._halves: dict[tuple[str, str, str], int] = {}  # (task, producer, dest) -> left

    # -- placing -----------------------------------------------------------------------------
    def place(self, task: Task, decision: Decision) -> None:
        """One part per node the task spans; the caller sends the input to the home node."""
        app = APPLICATIONS[task.app_id]
        plan = dict(decision.stage_nodes)
        for node_id in dict.fromkeys(plan[s.name] for s in app.stages):  # stage order
            node = self.nodes[node_id]
            mine = [s for s in app.stages if plan[s.name] == node_id]
            # An entry stage away from home waits for the forwarded input (one more input).
            waiting = {s.name: len(s.deps) if s.deps or node_id == decision.node else 1
                       for s in mine}
            part = TaskState(task, node_id, waiting, stage_nodes=plan)
            part.estimate_left_s = sum(self.costs.stage_best_ms(s.name, task.input_size,
                                                                node.spec) for s in mine) / 1000.0
            part.true_left_s = sum(self._true_best_s(node, task, s.name) for s in mine)
            self.meter.accumulate(node)
            node.true_left_s += part.true_left_s
            node.tasks[task.task_id] = part
            node.host_bytes += task.input_size
        self._left[task.task_id] = len(app.stages)

    # -- data between nodes ------------------------------------------------------------------
    def forward_input(self, home: Node, part: TaskState) -> None:
        """The input reached the home node: send it on to every other node with an entry
        stage."""
        app = APPLICATIONS[part.task.app_id]
        dests = dict.fromkeys(part.stage_nodes[s.name] for s in app.stages if not s.deps)
        for dest in dests:
            if dest != home.spec.node_id:
                self._send(home, dest, part.task, INPUT, self.links.task_bytes(part.task))

    def stage_finished(self, node: Node, part: TaskState, stage_name: str) -> None:
        """A stage of a split task finished on ``node`` (local consumers are already told):
        send its output to consumers elsewhere; a finished part leaves its node; the last
        stage of the task uploads the result."""
        app = APPLICATIONS[part.task.app_id]
        here = node.spec.node_id
        dests = dict.fromkeys(part.stage_nodes[s.name] for s in app.stages
                              if stage_name in s.deps and part.stage_nodes[s.name] != here)
        data = stage_output_bytes(self.fractions, stage_name, self.links.task_bytes(part.task))
        for dest in dests:
            self._send(node, dest, part.task, stage_name, data)
        task_id = part.task.task_id
        self._left[task_id] -= 1
        if part.first_start_s is not None:
            self._first_start[task_id] = min(self._first_start.get(task_id, part.first_start_s),
                                             part.first_start_s)
        if self._left[task_id] == 0:
            del self._left[task_id]
            part.first_start_s = self._first_start.pop(task_id, part.first_start_s)
            self.links.send_result(node, part.task)  # the engine completes the task after it
        elif len(part.done) == len(part.waiting_deps):
            self.meter.accumulate(node)
            del node.tasks[task_id]
            node.host_bytes -= part.task.input_size

    def _send(self, src: Node, dest_id: str, task: Task, producer: str, size: float) -> None:
        dest = self.nodes[dest_id]
        key = (task.task_id, producer, dest_id)
        self._halves[key] = 2
        self.queue.log("output_sent", task.task_id, producer, src.spec.node_id, dest_id)
        size = max(1.0, size)
        self.meter.accumulate(dest)  # src is up to date: a stage just finished there
        self.links.send_between(src, dest, key, size)

    def transfer_done(self, key: tuple) -> None:
        """One half (``("up"|"down", task, producer, dest)``) of a transfer is over; when both
        are, the destination's consumers of ``producer`` have that input."""
        _, task_id, producer, dest_id = key
        pair = (task_id, producer, dest_id)
        self._halves[pair] -= 1
        if self._halves[pair] > 0:
            return
        del self._halves[pair]
        self.queue.log("output_received", task_id, producer, dest_id)
        part = self.nodes[dest_id].tasks[task_id]
        for stage in APPLICATIONS[part.task.app_id].stages:
            wanted = (not stage.deps) if producer == INPUT else producer in stage.deps
            if wanted and stage.name in part.waiting_deps:
                part.waiting_deps[stage.name] -= 1
                if part.waiting_deps[stage.name] == 0:
                    self.stages.make_ready(dest_id, task_id, stage.name)
        self.stages.schedule(dest_id)
