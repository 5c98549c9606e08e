"""Network transfers in the simulator: each node's downlink and uplink as processor sharing.

A task's input crosses its node's downlink before its stages can start, and its result crosses
the uplink after the last stage. The transfers on one link share its bandwidth equally. Only
the transfer with the least left is given a pending ``LINK_DONE`` event: with equal shares it
finishes first, and every start or finish on the link re-times the rest (a version number on
the link voids the events queued before).

What follows a finished transfer (the model load, the stages, the task's completion) is the
engine's business; :meth:`LinkTransfers.finish` only reports that it happened.
"""

from __future__ import annotations

from workload.model import Task

from simulator.events import LINK_DONE, EventQueue
from simulator.runtime import Link, Node, Run, advance
from simulator.utilisation import UtilisationMeter

__all__ = ["LinkTransfers"]


class LinkTransfers:
    """The transfers on every node's links, and how many bytes a task moves over them."""

    def __init__(self, queue: EventQueue, nodes: dict[str, Node], meter: UtilisationMeter,
                 fixed_bytes: float, bytes_per_unit: float, result_fraction: float):
        self.queue = queue
        self.nodes = nodes
        self.meter = meter
        self.fixed_bytes = fixed_bytes
        self.bytes_per_unit = bytes_per_unit
        self.result_fraction = result_fraction

    def task_bytes(self, task: Task) -> float:
        """What the task moves over the downlink (SimulationConfig.bytes_per_unit)."""
        return self.fixed_bytes + self.bytes_per_unit * float(task.input_size)

    def send_input(self, node: Node, task: Task) -> None:
        """Start the task's input down to ``node`` (key ``("down", task_id)``)."""
        self._start(node, node.down, ("down", task.task_id), self.task_bytes(task))

    def send_result(self, node: Node, task: Task) -> None:
        """Start the task's result up from ``node`` (key ``("up", task_id)``); at least a byte."""
        result_bytes = max(1.0, self.task_bytes(task) * self.result_fraction)
        self._start(node, node.up, ("up", task.task_id), result_bytes)

    def send_between(self, src: Node, dest: Node, key: tuple, size_bytes: float) -> None:
        """``size_bytes`` out of ``src``'s uplink and into ``dest``'s downlink at once (a split
        task's stage output, :mod:`simulator.stage_split`): two halves whose ``LINK_DONE``
        events carry the keys ``("up", *key)`` and ``("down", *key)``."""
        self._start(src, src.up, ("up", *key), size_bytes)
        self._start(dest, dest.down, ("down", *key), size_bytes)

    def finish(self, node_id: str, key: tuple, version: int) -> bool:
        """Handle a ``LINK_DONE`` event: False if a later start or finish on the link voided it,
        else the transfer ``key`` is over (removed, the others re-timed) and True."""
        node = self.nodes[node_id]
        link = node.down if key[0] == "down" else node.up
        if link.version != version:
            return False
        run = next(r for r in link.runs if r.key == key)
        self.meter.accumulate(node)  # the link was busy until now
        advance(link.runs, link.last_update_s, self.queue.now)
        link.last_update_s = self.queue.now
        link.runs.remove(run)
        self._reschedule(node, link)
        return True

    def _start(self, node: Node, link: Link, key: tuple, size_bytes: float) -> None:
        advance(link.runs, link.last_update_s, self.queue.now)
        link.last_update_s = self.queue.now
        link.runs.append(Run(key, size_bytes / link.bandwidth_bytes_s))
        self._reschedule(node, link)

    def _reschedule(self, node: Node, link: Link) -> None:
        # Equal shares: the transfer with the least left finishes first, so one event per link
        # suffices (the others are re-timed when it fires). The link's version voids old events.
        link.version += 1
        if not link.runs:
            return
        share = 1.0 / len(link.runs)
        first = min(link.runs, key=lambda r: r.remaining)
        for run in link.runs:
            run.rate = share
        self.queue.push(self.queue.now + first.remaining / share, LINK_DONE,
                        (node.spec.node_id, first.key, link.version))
