"""Builders and checks shared by the node-scheduler tests (``test_node_schedulers.py`` and the
scheduler zoo's ``test_zoo_*.py``): computing units, ready stages, the cost-model fixture, the
check of a scenario row's expected placements, the run-twice determinism check, a random node
for property loops and a short simulation of the paper cluster.

A plain module, not a conftest: pytest puts ``tests/unit`` on ``sys.path``, so the test files
import it by basename (``from stage_builders import cpu, gpu, st``). Importing ``costs`` makes
the fixture visible in that test module (module scope: one ``CostModel`` per test module).

Where the test files differ (how many co-run slots a GPU has unless a row says otherwise, a
stage's default input size) the difference stays visible in the test file: a
``functools.partial`` of these builders or an explicit argument, never a changed default here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from interference.schedulers import make_node_scheduler, validate_assignments
from workload.catalog import APPLICATIONS
from workload.estimates import CostModel
from workload.model import Assignment, ComputingUnit, Stage, Task

SIZE = 76_800_000  # a 10 s grey 640x480 clip at 25 fps, in pixels (calibration's paper setting)
GPU_MODELS = ["k80", "p100", "v100", "p4"]  # the models a random node draws its GPUs from


@pytest.fixture(scope="module")
def costs() -> CostModel:
    """The shipped calibration's cost model (import it into a test module to use it there)."""
    return CostModel()


# -- units and stages --------------------------------------------------------------------------

def cpu(i: int, **kw) -> ComputingUnit:
    """Core ``cpu:<i>``; ``kw`` are further ComputingUnit fields (speed, running, free_at_s)."""
    return ComputingUnit(f"cpu:{i}", "cpu", **kw)


def gpu(i: int, model: str = "k80", capacity: int = 1, **kw) -> ComputingUnit:
    """GPU ``gpu:<i>`` of ``model`` with ``capacity`` co-run slots (1: ComputingUnit's own
    default); ``kw`` are further fields (running, free_at_s, memory_mb, memory_util, speed).
    Files whose rows mean two slots by default bind ``partial(gpu, capacity=2)``."""
    return ComputingUnit(f"gpu:{i}", "gpu", model=model, capacity=capacity, **kw)


def gpu_running(i: int, *running: str, **kw) -> ComputingUnit:
    """``gpu(i, **kw)`` already running the stage types ``running`` (given positionally)."""
    return gpu(i, running=running, **kw)


def app_of(stage_name: str) -> str:
    """The first built-in application (catalog order) that has a stage called ``stage_name``."""
    return next(a.app_id for a in APPLICATIONS.values()
                if stage_name in [s.name for s in a.stages])


def st(name: str, task: str = "t1", ready: float = 0.0, size: int = SIZE,
       app: str | None = None) -> Stage:
    """Ready stage ``name`` of task ``task`` (of ``app``; by default the first application
    with that stage), ``size`` pixels of input, ready at ``ready`` s; whether it can run on a
    GPU comes from the catalog."""
    app = app or app_of(name)
    return Stage(task, app, name, size, APPLICATIONS[app].stage(name).gpu_capable, ready)


def label(stage: Stage) -> str:
    """``task/stage``: how scenario rows name a ready stage."""
    return f"{stage.task_id}/{stage.stage}"


def make(name: str, costs: CostModel, settings: dict, own: type):
    """The node scheduler a scenario row names: the class under test (``own``, when ``name``
    is its registry name) built directly, any other through the registry."""
    if name == own.name:
        return own(costs, **settings)
    return make_node_scheduler(name, costs=costs, **settings)


# -- checks ------------------------------------------------------------------------------------

def check_expected(out: list[Assignment], ready: list[Stage], units: list[ComputingUnit],
                   expected: dict, key: Callable[[Stage], str] = label) -> dict[str, Assignment]:
    """Check one scenario row: ``out`` obeys the shared rules (validate_assignments), the row
    names every ready stage (by ``key``, default ``label``), and each stage it names starts on
    the expected unit with the keyword in the reason (``(unit, keyword)``) or waits (``None``).
    Returns the assignments by key."""
    validate_assignments(out, ready, units)
    got = {key(a.stage): a for a in out}
    assert set(expected) == {key(s) for s in ready}, "the row must name every ready stage"
    for name, want in expected.items():
        if want is None:
            assert name not in got, f"{name} should wait, got {got.get(name)}"
        else:
            unit, keyword = want
            assert name in got, f"{name} should start on {unit}; assignments {out}"
            assert got[name].unit_id == unit, got[name].reason
            assert keyword in got[name].reason, got[name].reason
    return got


def assign_twice(build: Callable[[], Any], ready: list[Stage], units: list[ComputingUnit],
                 now: float) -> tuple[list[Assignment], Any]:
    """Assign ``ready`` with two schedulers fresh from ``build()``: the first's answer obeys
    the shared rules and the second gives the same (deterministic). Returns (the answer, the
    first scheduler)."""
    scheduler = build()
    out = scheduler.assign(ready, units, now)
    validate_assignments(out, ready, units)
    again = build().assign(ready, units, now)
    assert again == out, f"{getattr(scheduler, 'name', scheduler)} is not deterministic"
    return out, scheduler


def random_node(rng: random.Random, *, max_cpus: int, busy_share: float,
                speeds: list[float], gpu_memory: list[float] | None = None,
                ) -> tuple[list[ComputingUnit], list[Stage]]:
    """A random node and its ready stages, drawn from ``rng``: 0..``max_cpus`` cores (each
    busy with tracking with probability ``busy_share``, of a speed from ``speeds``), 0..3 GPUs
    of 1..3 slots running random GPU stages, and 0..8 ready stages of random applications.
    With ``gpu_memory`` each GPU also gets a memory size drawn from it (and, when busy and
    sized, a memory use up to 90%); without it GPUs have no memory reading."""
    gpu_stages = [s.name for a in APPLICATIONS.values() for s in a.stages if s.gpu_capable]
    units: list[ComputingUnit] = []
    for i in range(rng.randint(0, max_cpus)):
        busy = rng.random() < busy_share
        units.append(cpu(i, speed=rng.choice(speeds), running=("tracking",) if busy else (),
                         free_at_s=rng.uniform(0, 5) if busy else 0.0))
    for i in range(rng.randint(0, 3)):
        capacity = rng.randint(1, 3)
        running = tuple(rng.sample(gpu_stages, rng.randint(0, capacity)))
        memory = {} if gpu_memory is None else {"memory_mb": rng.choice(gpu_memory)}
        model = rng.choice(GPU_MODELS)
        free_at_s = rng.uniform(0, 5) if running else 0.0
        if memory:
            memory["memory_util"] = (rng.uniform(0, 0.9) if running and memory["memory_mb"]
                                     else 0.0)
        units.append(gpu(i, model, capacity=capacity, running=running, free_at_s=free_at_s,
                         **memory))
    rng.shuffle(units)
    ready = []
    for t in range(rng.randint(0, 8)):
        app = rng.choice(list(APPLICATIONS))
        name = rng.choice([s.name for s in APPLICATIONS[app].stages])
        ready.append(st(name, f"t{t}", round(rng.uniform(0, 3), 1), app=app,
                        size=rng.choice([0, 36_864, SIZE])))
    return units, ready


def random_units(rng: random.Random) -> list[ComputingUnit]:
    """A small random node for the deadline and tenant schedulers: 1..3 cores (each busy with
    a placeholder stage "x" with probability 0.3) and 0..2 GPUs (k80, v100 or t4: models with
    a power entry) of 1..2 slots, idle."""
    units = [cpu(i, running=("x",) if rng.random() < 0.3 else ())
             for i in range(rng.randint(1, 3))]
    units += [gpu(i, rng.choice(["k80", "v100", "t4"]), rng.randint(1, 2))
              for i in range(rng.randint(0, 2))]
    return units


# -- a short simulation ------------------------------------------------------------------------

@dataclass
class SimRun:
    """One short simulation: the simulator's result (``.metrics``, ``.events``), the node
    scheduler it ran with, and the tasks it was given."""

    result: Any
    scheduler: Any
    tasks: list[Task]


def simulate(build: Callable[[CostModel, list[Task]], Any], seed: int, *, tasks: int = 120,
             nodes: int | None = None, policy: str = "mct",
             prepare: Callable[[CostModel, list[Task]], list[Task]] | None = None) -> SimRun:
    """Run ``saturated_workload(tasks, seed)`` on the paper cluster (its first ``nodes``
    workers; all when None) with the paper's costs, ``policy`` placing tasks on nodes and
    ``build(costs, tasks)`` as the node scheduler. ``prepare(costs, tasks)``, when given,
    returns the tasks to run instead (e.g. with tenants and deadlines)."""
    from placement.policies import make_policy
    from simulator import Simulator
    from simulator.scenarios import paper_cluster, paper_costs, saturated_workload
    paper, cluster = paper_costs(), paper_cluster(nodes=nodes)
    workload = saturated_workload(tasks, seed=seed)
    if prepare is not None:
        workload = prepare(paper, workload)
    scheduler = build(paper, workload)
    result = Simulator(paper).run(make_policy(policy, cluster, paper, seed=seed), scheduler,
                                  cluster, workload, seed=seed)
    return SimRun(result, scheduler, workload)
