"""The placement service's online learning, closed in the simulator.

On the real engines (docs/results-engines.md, "On three emulated hosts") LDWP + IAWP with the
online service
stays behind MCT at measured speeds, and replaying one recorded run (``benchmarks/
replay_decisions.py``) cannot say why: a replay cannot show what the versions' own decisions
would have produced. This closes the loop in the simulator, on the same cluster spec and the
real runs' task mix: routers decide with the newest version the service's learner published,
the simulator runs those decisions, and every completion goes back to the same learner as a
NodeFeedback record, as the executors' feedback does:

- the learner is :class:`placement.service.learner.OnlineLearner` with the service's defaults
  (learning settings, first version after 1,000 records, then every ``publish_every``, its
  gates and burst check, which holds versions it cannot judge yet, and its version trial:
  by default interleaved, ``placement.service.interleaved_trial``, the candidate deciding its
  share of each round's task ids beside the champion; with ``--trial-share 1`` alternating
  windows, ``placement.service.version_trial``, where a round is one window, as a round is
  decided within its first second; ``--trial-window 0`` turns it off) and one
  :class:`placement.measured_costs.MeasuredCosts` that the routers share: both learn task
  times per type and node from the timings, as on the real engines;
- a router (:class:`OnlineRouted`) decides with ``NumpyLDWPPolicy`` on the newest version,
  with that cost model (so the observation's speed factor is 1: the learned estimates hold the
  speeds, as the real router's do) and, as the real router, its own ledger of the work it
  sent: each node's backlog is the learned estimates of its tasks in flight
  (``pyflink_jobs.in_flight``); before the first version, with the learner's starting
  weights (the untrained residual: MCT at the learned costs);
- feedback: per finished task a TaskTiming (queue and service time; service time is the task's
  stage busy time, at most its latency), with the routed node's queue, backlog and speed as the
  router saw them, flushed to the learner every ``feedback_interval_s`` of simulated time, and
  node states from each decision's observation; after each round, every node idle (the
  simulator ran the round to its end).

Variants, ``rounds`` consecutive runs of ``tasks`` tasks each (the learner and the cost model
carry over from round to round, as the service does across a benchmark's rounds; MCT has
nothing to carry):

- ``MCT at measured speeds``: the simulator's own rule, told the true speeds (as in
  ``benchmarks/flink_e2e.py --simulate``);
- ``LDWP prior, costs learned online``: the loop with the learner never publishing (its
  versions unused): what the router does on its prior alone;
- ``LDWP online``: the loop as the service runs it.

    python -m benchmarks.online_loop [--spec hosts] [--tasks 300] [--rounds 6] [--seeds 0,1,2]
                                     [--records payload] [--work-scale 4]

Writes benchmarks/results/online_loop_<spec>.json and a PNG (throughput per round).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import tempfile
import time
from pathlib import Path

from benchmarks._common import RESULTS, description, write_result
from workload.feedback import BYTES_PER_S_PER_MBPS
from workload.model import Decision, Observation, Policy

__all__ = ["OnlineRouted", "run_variant", "main"]

#: seconds of simulated time between two flushes of feedback to the learner (the executors'
#: feedback interval)
FEEDBACK_INTERVAL_S = 0.5
VARIANTS = ("MCT at measured speeds", "LDWP prior, costs learned online", "LDWP online")


class OnlineRouted(Policy):
    """A router deciding with the newest version ``learner`` published (``learn=False``: with
    its starting weights for good), feeding it every completion as NodeFeedback."""

    name = "ldwp-online"

    def __init__(self, learner, cluster, costs, learn: bool = True,
                 feedback_interval_s: float = FEEDBACK_INTERVAL_S,
                 correction_scale: float = 1.0):
        from placement.ldwp.inference import NumpyLDWPPolicy
        self.learner, self.cluster, self.costs, self.learn_online = learner, cluster, costs, learn
        self.interval_s = feedback_interval_s
        # how much of each published version's learned correction the routers apply
        # (NumpyLDWPPolicy.set_correction_scale; 1: all of it, as the real routers do)
        self.correction_scale = correction_scale
        with tempfile.TemporaryDirectory(prefix="online-loop-") as tmp:
            start = Path(tmp) / "start.spm"
            learner.agent.save(start)
            self.router = NumpyLDWPPolicy.from_file(start, cluster, costs)
        self.version = None
        self.candidate = None         # a version on an interleaved trial (its share of tasks)
        self.offset_ms = 0.0          # simulated time of the rounds before this one
        self.now_s = 0.0              # the newest simulated time this policy has seen
        self._decided: dict[str, tuple] = {}    # task id -> (decided s, task, routed numbers)
        self._stage_s: dict[str, float] = {}    # task id -> stage busy seconds
        self._timings: dict[str, list] = collections.defaultdict(list)
        self._states: dict[str, object] = {}
        self._last_flush_s = 0.0
        self._specs = {n.node_id: n for n in cluster.nodes}
        # the router's ledger (pyflink_jobs.in_flight): estimated work in flight per node
        self._backlog_s = dict.fromkeys(cluster.node_ids, 0.0)
        self._work_s: dict[str, float] = {}

    # -- rounds -------------------------------------------------------------------------------
    def next_round(self) -> None:
        """Flush what is left, every node idle, and move the clock past this round (each run
        starts at 0 s)."""
        self._states = {n: dataclasses.replace(s, queue_depth=0)
                        for n, s in self._states.items()}
        self._flush()
        self.offset_ms += (self.now_s + 10.0) * 1000.0
        self.now_s, self._last_flush_s = 0.0, 0.0

    # -- the router ----------------------------------------------------------------------------
    def decide(self, observation: Observation) -> Decision:
        self._advance(observation.now_s)
        # the learned estimates hold each node's speed (MeasuredCosts), and the backlog is the
        # router's own ledger, as on the real router
        nodes = tuple(dataclasses.replace(s, speed_factor=1.0,
                                          backlog_s=self._backlog_s.get(s.node_id, 0.0))
                      for s in observation.nodes)
        for state in nodes:
            self._states[state.node_id] = state
        router, version = self.router, self.version
        if self.candidate is not None and self.candidate.decides(observation.task.task_id):
            router, version = self.candidate.policy, self.candidate.version
        decision = router.decide(dataclasses.replace(observation, nodes=nodes))
        chosen = next(s for s in nodes if s.node_id == decision.node)
        task = observation.task
        work = self.costs.estimate_s(decision.node, task.app_id, task.input_size, explore=False)
        self._work_s[task.task_id] = work
        self._backlog_s[decision.node] += work
        self._decided[observation.task.task_id] = (
            observation.now_s, observation.task,
            (chosen.queue_depth, chosen.backlog_s * 1000.0, chosen.speed_factor,
             -1 if version is None else version))
        return decision

    def observe_stage_runs(self, task_id: str, node_id: str, stage_runs) -> None:
        self._stage_s[task_id] = sum(share for _, _, share in stage_runs)

    def observe_completion(self, task_id: str, latency_s: float, node_id: str) -> None:
        decided_s, task, routed = self._decided.pop(task_id)
        self._backlog_s[node_id] = max(0.0, self._backlog_s[node_id]
                                       - self._work_s.pop(task_id, 0.0))
        finished_s = decided_s + latency_s
        service_s = min(latency_s, self._stage_s.pop(task_id, latency_s))
        self._timings[node_id].append((
            {"task_id": task_id, "app_id": task.app_id, "input_size": task.input_size,
             "queue_ms": (latency_s - service_s) * 1000.0, "service_ms": service_s * 1000.0,
             "finished_at_ms": int(self.offset_ms + finished_s * 1000.0)}, routed))
        self._advance(finished_s)

    # -- feedback ------------------------------------------------------------------------------
    def _advance(self, now_s: float) -> None:
        self.now_s = max(self.now_s, now_s)
        if self.now_s - self._last_flush_s >= self.interval_s:
            self._flush()

    def _flush(self) -> None:
        self._last_flush_s = self.now_s
        emitted = int(self.offset_ms + self.now_s * 1000.0)
        records = []
        for node_id in self.cluster.node_ids:
            state = self._states.get(node_id)
            done = self._timings.pop(node_id, [])
            if state is None and not done:
                continue
            record = {"node_id": node_id, "emitted_at_ms": emitted,
                      "completed": [t for t, _ in done],
                      "routed_queue": [r[0] for _, r in done],
                      "routed_backlog_ms": [r[1] for _, r in done],
                      "routed_speed_factor": [r[2] for _, r in done],
                      "routed_model_version": [r[3] for _, r in done]}
            if state is not None:   # what an executor reports (links as bytes/s)
                spec = self._specs[node_id]
                record.update(cpu_util=state.cpu_util, gpu_util=state.gpu_util,
                              host_mem_util=state.host_mem_util,
                              gpu_mem_util=state.gpu_mem_util, in_flight=state.queue_depth,
                              queue_depth=0,
                              uplink_bytes_per_s=state.uplink_util * spec.uplink_mbps
                              * BYTES_PER_S_PER_MBPS,
                              downlink_bytes_per_s=state.downlink_util * spec.downlink_mbps
                              * BYTES_PER_S_PER_MBPS)
            records.append(record)
        if not records:
            return
        self.learner.take(records)
        self.learner.train_pending()
        if self.learn_online:
            self._load_newest()

    def _load_newest(self) -> None:
        """What the real router's ModelRefresher does: the newest version, or for a candidate
        on an interleaved trial (pyflink_jobs.model_trial) the champion beside the candidate,
        which then decides its share of the task ids."""
        from placement.service.interleaved_trial import candidate_trial
        from pyflink_jobs.model_trial import CandidateArm
        latest = self.learner.store.latest()
        if latest is None or latest["version"] in (
                self.version, None if self.candidate is None else self.candidate.version):
            return
        trial = candidate_trial(latest)
        if trial is None:
            self.version, self.router = latest["version"], self._policy(latest["version"])
            self.candidate = None
            return
        if trial.champion_version >= 0 and trial.champion_version != self.version:
            self.version = trial.champion_version
            self.router = self._policy(self.version)
        self.candidate = CandidateArm(self._policy(latest["version"]), latest["version"],
                                      trial.share)

    def _policy(self, version: int):
        from placement.ldwp.inference import NumpyLDWPPolicy
        policy = NumpyLDWPPolicy.from_bytes(self.learner.store.read_bytes(version),
                                            self.cluster, self.costs)
        policy.set_correction_scale(self.correction_scale)
        return policy


def _setup(spec: str, work_scale: float, records: str = "light"):
    """(cost model, true cluster, simulator) as ``benchmarks.flink_e2e --simulate`` builds them."""
    from benchmarks.flink_e2e import load_spec, spec_simulator
    from simulator.from_spec import cluster_from_spec
    loaded = load_spec(spec)
    costs, simulator = spec_simulator(loaded, records, work_scale)
    return costs, cluster_from_spec(loaded, None, "truth"), simulator


def run_variant(variant: str, spec: str, tasks: int, rounds: int, seed: int,
                work_scale: float = 1.0, publish_every: int = 300,
                records: str = "light", learning: dict | None = None,
                burst_tolerance: float = 0.0, correction_scale: float = 1.0,
                judge: str = "drain", first_version: int = 1000,
                trial_window: int | None = None,
                trial_share: float | None = None) -> list[dict]:
    """One variant's ``rounds`` consecutive runs on ``spec`` (seed ``seed``): per round its
    throughput (tasks/s), task counts per node and per (task type, node), and the model
    versions the routers used.
    ``records`` and ``work_scale`` as ``benchmarks.flink_e2e --simulate`` takes them (payload
    records at work scale 4 put MCT at the real payload run's rate: docs/results-engines.md);
    ``learning``:
    ``service.learning`` settings on top of the service's defaults; ``burst_tolerance``: the
    burst check's (``placement.service.burst_check``; inf: no check); ``correction_scale``: the
    share of each version's learned correction the routers apply; ``judge``: the learner's
    outcome of an example, "drain" or "latency" (``placement.service.drain_judge``);
    ``first_version``: records before the first version, and the fewest tasks the burst check
    judges a version on (the service's ``min_records_first_version``); ``trial_window``: the
    version trial's window in judged tasks (``placement.service.version_trial``; None: the
    service's default, 0: no trial, every version that passes the checks serves);
    ``trial_share``: the candidate's share of the tasks while on trial (None: the service's
    default; 1: alternating windows, each deciding every task)."""
    import torch

    from benchmarks.flink_e2e import SIM_NODE_SCHEDULER, sim_tasks
    from interference.schedulers import make_node_scheduler
    from placement.measured_costs import MeasuredCosts
    from placement.policies import make_policy
    from placement.service.burst_check import BurstCheck
    from placement.service.learner import OnlineLearner
    from placement.service.settings import ServiceSettings
    from placement.service.store import ModelStore
    torch.set_num_threads(1)
    costs, truth, simulator = _setup(spec, work_scale, records)
    rows = []
    with tempfile.TemporaryDirectory(prefix="online-loop-store-") as tmp:
        policy = None
        if variant != VARIANTS[0]:
            settings = ServiceSettings()
            if trial_window is not None:
                settings = settings.model_copy(update={"trial_window_tasks": trial_window})
            if trial_share is not None:
                settings = settings.model_copy(update={"trial_share": trial_share})
            learned = MeasuredCosts(truth, prior=costs)
            learner = OnlineLearner(truth, ModelStore(Path(tmp), keep=10_000),
                                    {**settings.learning, **(learning or {}), "seed": seed},
                                    publish_every=publish_every,
                                    min_records_first_version=first_version,
                                    costs=learned,
                                    burst_check=BurstCheck(tolerance=burst_tolerance,
                                                           min_tasks=first_version),
                                    judge=judge, trial=settings.version_trial())
            policy = OnlineRouted(learner, truth, learned, learn=variant == VARIANTS[2],
                                  correction_scale=correction_scale)
        for round_ in range(rounds):
            workload = sim_tasks(tasks, seed=100 + 10 * seed + round_)
            current = policy if policy is not None else make_policy("mct", truth, costs,
                                                                   seed=seed)
            scheduler = make_node_scheduler(SIM_NODE_SCHEDULER, costs, seed=seed)
            # a burst is decided within its first second: the version at its start decides it
            at_start = policy.version if policy is not None else None
            candidate_at_start = None if policy is None or policy.candidate is None \
                else policy.candidate.version
            result = simulator.run(current, scheduler, truth, workload, seed=seed)
            metrics, app_of = result.metrics, {t.task_id: t.app_id for t in workload}
            per_app_node: dict[str, dict[str, int]] = {}
            for task_id, decision in result.decisions:   # where each task type went
                by_node = per_app_node.setdefault(app_of[task_id], {})
                by_node[decision.node] = by_node.get(decision.node, 0) + 1
            row = {"variant": variant, "seed": seed, "round": round_,
                   "throughput_per_s": metrics.throughput_per_min / 60.0,
                   "per_node": dict(metrics.per_node_tasks), "per_app_node": per_app_node}
            if policy is not None:
                row["version_at_start"], row["version_at_end"] = at_start, policy.version
                row["candidate_at_start"] = candidate_at_start
                policy.next_round()   # the round's last feedback: the learner's counts after it
                row["versions_published"] = (policy.learner.store.latest() or {}).get("version")
                row["versions_refused"] = policy.learner.models_rejected
                row["versions_held"] = policy.learner.versions_held
                if policy.learner.trials is not None:
                    row["trials"] = policy.learner.trials.stats()
            rows.append(row)
    return rows


def _job(args: tuple) -> list[dict]:
    import logging
    logging.getLogger("placement.service").setLevel(logging.ERROR)  # refusals: in the JSON
    return run_variant(*args)


def summarise(rows: list[dict]) -> list[dict]:
    """Per variant and round: mean and 95% CI of throughput over the seeds; and per variant
    over the rounds after the first (the learner has data from then on)."""
    from benchmarks.baselines import confidence_interval
    out = []
    for variant in VARIANTS:
        mine = [r for r in rows if r["variant"] == variant]
        for round_ in sorted({r["round"] for r in mine}):
            values = [r["throughput_per_s"] for r in mine if r["round"] == round_]
            mean, low, high = confidence_interval(values)
            out.append({"variant": variant, "round": round_, "throughput_per_s":
                        {"mean": mean, "ci95": [low, high], "n": len(values)}})
    return out


def paired_against(rows: list[dict], variant: str, baseline: str) -> dict:
    """``variant`` over ``baseline`` per (seed, round) after round 0: mean and 95% CI."""
    from benchmarks.baselines import confidence_interval
    base = {(r["seed"], r["round"]): r["throughput_per_s"] for r in rows
            if r["variant"] == baseline}
    changes = [r["throughput_per_s"] / base[(r["seed"], r["round"])] - 1.0 for r in rows
               if r["variant"] == variant and r["round"] > 0
               and (r["seed"], r["round"]) in base]
    mean, low, high = confidence_interval(changes)
    return {"mean": mean, "ci95": [low, high], "n": len(changes)}


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, variant in enumerate(VARIANTS):
        mine = [s for s in summary if s["variant"] == variant]
        x = [s["round"] for s in mine]
        y = [s["throughput_per_s"]["mean"] for s in mine]
        err = [[m - s["throughput_per_s"]["ci95"][0] for m, s in zip(y, mine)],
               [s["throughput_per_s"]["ci95"][1] - m for m, s in zip(y, mine)]]
        ax.errorbar([v + 0.05 * i for v in x], y, yerr=err, marker="o", capsize=3,
                    label=variant)
    ax.set_xlabel("round (the learner carries over)")
    ax.set_ylabel("tasks/s (simulated)")
    ax.set_title("Online learning closed in the simulator")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--spec", default="hosts")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--work-scale", type=float, default=4.0,
                        help="stage compute times x this (4 with payload records: the real "
                             "payload run's rate)")
    parser.add_argument("--publish-every", type=int, default=300)
    parser.add_argument("--records", choices=("light", "payload"), default="payload",
                        help="bytes per task as the real run's records (default payload)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--learning", default="{}",
                        help="JSON object of service.learning settings (LDWPSettings) on top of "
                             "the service's defaults, e.g. '{\"evidence_half\": 500}'")
    parser.add_argument("--judge", choices=("drain", "latency"), default="drain",
                        help="what the learner learns of each task: its node's drain time "
                             "(default) or its own latency")
    parser.add_argument("--burst-tolerance", type=float, default=0.0,
                        help="the service's burst check tolerance (inf: no check)")
    parser.add_argument("--correction-scale", type=float, default=1.0,
                        help="share of each version's learned correction the routers apply")
    parser.add_argument("--trial-window", type=int, default=None,
                        help="the version trial's window in judged tasks (default: the "
                             "service's; 0: no trial)")
    parser.add_argument("--trial-share", type=float, default=None,
                        help="the candidate's share of the tasks while on trial (default: the "
                             "service's; 1: alternating windows)")
    parser.add_argument("--name", default=None, help="result file name (default online_loop_"
                                                     "<spec>)")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds must be integers separated by commas, got {args.seeds!r}")
    if not seeds or args.tasks < 1 or args.rounds < 1 or args.publish_every < 1 \
            or not args.work_scale > 0 or not args.burst_tolerance >= 0 \
            or not 0 <= args.correction_scale <= 1 \
            or (args.trial_window is not None and args.trial_window < 0) \
            or (args.trial_share is not None and not 0 < args.trial_share <= 1):
        parser.error("need a seed, --tasks, --rounds and --publish-every >= 1, --work-scale > 0, "
                     "--burst-tolerance >= 0, --correction-scale in [0, 1], --trial-window "
                     ">= 0 and --trial-share in (0, 1]")
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm
    import json
    try:
        learning = json.loads(args.learning)
        if not isinstance(learning, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        parser.error(f"--learning must be a JSON object: {exc}")
    from benchmarks.flink_e2e import load_spec
    from placement.service.learner import learning_settings
    from placement.service.settings import ServiceSettings
    from workload.cluster_spec import SpecError
    try:   # refused here, in one line, not as a worker's traceback
        learning_settings(learning)
        load_spec(args.spec)
    except (SpecError, ValueError, TypeError) as exc:
        parser.error(str(exc))
    jobs = [(v, args.spec, args.tasks, args.rounds, s, args.work_scale, args.publish_every,
             args.records, learning, args.burst_tolerance, args.correction_scale, args.judge,
             1000, args.trial_window, args.trial_share)
            for v in VARIANTS for s in seeds]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = [r for batch in tqdm(pool.map(_job, jobs), total=len(jobs), desc="online loop",
                                    unit="run", disable=None) for r in batch]
    summary = summarise(rows)
    verdict = {"online_vs_mct": paired_against(rows, VARIANTS[2], VARIANTS[0]),
               "online_vs_its_prior": paired_against(rows, VARIANTS[2], VARIANTS[1]),
               "prior_vs_mct": paired_against(rows, VARIANTS[1], VARIANTS[0])}
    name = args.name or f"online_loop_{args.spec}"
    path = write_result(name, {
        "spec": args.spec, "tasks": args.tasks, "rounds": args.rounds, "seeds": seeds,
        "work_scale": args.work_scale, "publish_every": args.publish_every,
        "records": args.records, "learning": learning,
        # None: no burst check (an infinite tolerance, which JSON cannot carry)
        "burst_tolerance": args.burst_tolerance if args.burst_tolerance != float("inf")
        else None, "correction_scale": args.correction_scale, "judge": args.judge,
        "trial_window_tasks": args.trial_window if args.trial_window is not None
        else ServiceSettings().trial_window_tasks,
        "trial_share": args.trial_share if args.trial_share is not None
        else ServiceSettings().trial_share,
        "feedback_interval_s": FEEDBACK_INTERVAL_S, "wall_s": time.perf_counter() - started,
        "verdict": verdict, "summary": summary, "runs": rows})
    plot(summary, RESULTS / f"{name}.png")
    for s in summary:
        t = s["throughput_per_s"]
        print(f"  {s['variant']:34s} round {s['round']}  {t['mean']:7.1f} tasks/s "
              f"[{t['ci95'][0]:.1f}, {t['ci95'][1]:.1f}]")
    for key, v in verdict.items():
        print(f"  {key}: {100 * v['mean']:+.1f}% [{100 * v['ci95'][0]:+.1f}, "
              f"{100 * v['ci95'][1]:+.1f}] over rounds 1+ ({v['n']} pairs)")
    print(f"wrote {path}")
    return {"path": str(path), "verdict": verdict}


if __name__ == "__main__":
    main()
