"""Users' own jobs on the real engines: examples (b) and (c), and the async model call of
``examples/async_scoring``, under each placement.

    python -m benchmarks.flink_e2e_examples [--quick] [--example text_inference|video_analytics|async_scoring]
    python -m benchmarks.flink_e2e --workload text_inference      # the same, from flink_e2e
    python -m benchmarks.flink_e2e_examples --spec hosts          # on the emulated hosts

Every variant is the example's **hooked job, unchanged** (``examples/<example>/hooked_job.py``)
on the local broker and the heterogeneous 3-TaskManager cluster of
``workload/specs/default.yaml``; only ``STREAMPLACE_HOOK_*`` variables of the submitting
process differ (the job's three lines stay as a user writes them). ``--spec hosts`` runs them on
the emulated-host cluster instead (``workload/specs/hosts.yaml``: one network namespace, shaped
link and CPU quota per TaskManager), where the heterogeneity is real for the plain job too:
a host's CPU quota slows any work on it, not only a streamplace executor's:

=================================  ===========================================================
Flink's default distribution       ``round_robin``: what Flink's ``rebalance`` does between an
                                   operator and its instances, one instance per TaskManager
least-outstanding                  fewest records in flight
MCT at measured speeds             minimum completion time from the measured work times per
                                   (task type, node) (``placement.measured_costs``)
LDWP + IAWP                        the LDWP model the placement service learns online
LDWP + IAWP, batching off          the same, every stage call with one input (the ablation)
=================================  ===========================================================

The plain job (``plain_job.py``, Flink places its map) is also run once per round and reported
beside them, with a caveat that makes it not comparable: this machine emulates a slow node by
repeating the work of a streamplace executor (``STREAMPLACE_WORK_MULTIPLIER``), which a user's
plain ``map`` never reads, so on tm_c the plain job gets the fast node the others do not.

Protocol as in ``benchmarks/flink_e2e.py``: one throwaway run on the fresh cluster, then the
variants in alternating order (``--runs`` rounds; rotated each round and reversed in
odd rounds, :func:`round_order`), fresh topics per run, a warm-up batch first
(Python workers, torch), then the measured records all at once (a backlog); throughput =
records / (last committed output - sending); every output read with read_committed and counted
exactly once. Each run also reports the time to the first committed output, the rate once
outputs flow (first to last committed output) and the job's checkpoint durations: with a
backlog, the exactly-once sink commits only when a checkpoint completes, and that time is part
of the throughput above. The rate through the job apart from its commits is
``written_records_per_s``: records / (the last output's broker append time - sending), the
output topic being created with ``message.timestamp.type=LogAppendTime`` so that the broker
stamps each output when the sink writes it, before its transaction commits. Each run also records where its slowest checkpoint waited, per
operator (``checkpoint_e2e_ms.slowest``: how long the barrier took to reach it, alignment,
snapshot) and which TaskManagers ran each operator (``operator_hosts``), the router's decision
p99 per phase and of its thread CPU time (``decision_phases_p99_us``,
``pyflink_jobs.decision_timing``) and, on emulated hosts, each host's CPU use over its quota and
throttled share of the time from sending to the last output, and the whole machine's busy
share (``host_load``, :mod:`benchmarks.host_load`), and each operator's busy, idle and
back-pressured share of that time with ``--vertex-time`` (``vertex_time``,
:mod:`benchmarks.vertex_time`).
``--only frozen`` adds an ablation that is not run by default: LDWP on the shipped residual
model with no placement service (no refresher, no online learning); ``--only "prior only"``
another: LDWP with a placement service of its own that serves its prior and never a learned
version (the service's plumbing without its learning); ``MCT at measured speeds, no call
groups`` (selected by any ``--only`` part that names MCT) the executors' per-record stages with one
input per call, as before call groups (:mod:`interference.executor.batching`). One benchmark at a time holds the
benchmark home (``benchmark.lock``). Writes ``benchmarks/results/flink_e2e_<example>.json`` and
``.png`` (``flink_e2e_<example>_<spec>`` for
another spec; ``_quick`` after a ``--quick`` run, ``_conf-<hash>`` with ``--flink-conf``
settings, so neither overwrites the full run's files).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks._common import RESULTS, description, exclusive_home, write_result
from benchmarks.flink_e2e import confidence
from benchmarks.flink_e2e import operator_hosts, vertex_names
from benchmarks.flink_e2e import rest_client as _rest

ROOT = Path(__file__).resolve().parents[1]
NODES = ("tm_a", "tm_b", "tm_c")
#: Outputs committed within less than this (about two checkpoints) give no flowing rate.
MIN_RATE_SPAN_S = 2.0
#: --overhead: extra warm-up batches at most, until the JIT compilers go quiet (--warm-jit-us)
WARM_BATCHES = 10
#: --overhead: the rates of each run summarised (committed; written, before the commit)
RUN_RATES = ("records_per_s", "written_records_per_s")
#: the output topic's setting: each record stamped with the broker's time of writing
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
VARIANTS = [
    ("Flink's default distribution (round-robin)", {"POLICY": "round_robin"}),
    ("least-outstanding", {"POLICY": "least_outstanding"}),
    ("MCT at measured speeds", {"POLICY": "mct"}),
    ("LDWP + IAWP", {"POLICY": "ldwp"}),
    ("LDWP + IAWP, batching off", {"POLICY": "ldwp", "BATCHING": "false"}),
]
#: Ablations run only when ``--only`` names them: the router's LDWP on the shipped residual
#: model, frozen (no placement service: no model refresher, no online learning).
FROZEN_LABEL = "LDWP frozen"
#: ``PRIOR_SERVICE_LABEL``: LDWP with a placement service of its own that serves its prior
#: (version 1) and never a learned version: the same plumbing as "LDWP + IAWP" (model refresh,
#: cost seeding from the service, the same feedback) without the learned versions and their
#: trial windows, so the two apart say what the learned versions cost or earn.
PRIOR_SERVICE_LABEL = "LDWP, the service's prior only"
PRIOR_SERVICE_URL = "<the prior-only service>"   # replaced by that service's URL at run time
EXTRA_VARIANTS = [
    (f"{FROZEN_LABEL} (shipped model, no service)",
     {"POLICY": "ldwp", "SERVICE_URL": "",
      "INITIAL_MODEL": str(ROOT / "placement" / "models" / "ldwp_residual_paper.spm")}),
    (f"{PRIOR_SERVICE_LABEL} (no learned versions)",
     {"POLICY": "ldwp", "SERVICE_URL": PRIOR_SERVICE_URL}),
    # the executors' per-record stages one input per call, as before 2026-12-06
    # (interference.executor.batching: call groups)
    ("MCT at measured speeds, no call groups", {"POLICY": "mct", "CALL_GROUPS": "false"}),
    # deciding late (pyflink_jobs.decision_hold): the router holds the next review in Kafka
    # while every host holds --hold-in-flight times its share of the executors' capacity
    ("MCT at measured speeds, decided late", {"POLICY": "mct", "HOLD_IN_FLIGHT": "late"}),
    (f"{PRIOR_SERVICE_LABEL}, decided late",
     {"POLICY": "ldwp", "SERVICE_URL": PRIOR_SERVICE_URL, "HOLD_IN_FLIGHT": "late"}),
    ("LDWP + IAWP, decided late", {"POLICY": "ldwp", "HOLD_IN_FLIGHT": "late"}),
]
#: --hold-in-flight's default: the "decided late" variants' depth (capacity shares per host)
HOLD_IN_FLIGHT = 3.0
#: The prior-only service never reaches a first learned version, and never trains: a
#: learner that trained without publishing would only take CPU from the job on this machine.
NEVER = 10**12
WORDS = ("the market rallied as the team won a cup while science labs found new stars and "
         "world leaders met to talk trade goals").split()


def records_for(example: str, count: int, seed: int, prefix: str) -> list[bytes]:
    """The example's input records (the same for every variant of a round)."""
    rng = random.Random(seed)
    if example in ("text_inference", "async_scoring"):  # reviews, JSON
        return [json.dumps({"id": f"{prefix}-{i}", "text": " ".join(
            rng.choices(WORDS, k=rng.randrange(5, 64)))}).encode() for i in range(count)]
    from streamplace.kafka_io import synthetic_task_events
    from workload.apps.registry import task_payload
    from workload.codec import encode
    out = []
    for event in synthetic_task_events(count, seed=seed, prefix=prefix):
        event["input_size"] = min(event["input_size"], 60_000)
        event["payload"] = task_payload(event["app_id"], event["input_size"], event["task_id"])
        out.append(encode("TaskEvent", event))
    return out


@contextmanager
def hook_environment(values: dict[str, str]):
    """``STREAMPLACE_HOOK_*`` variables for the job submissions inside the block."""
    keys = {f"STREAMPLACE_HOOK_{k}": v for k, v in values.items()}
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def round_order(variants: list, round_: int) -> list:
    """The variants' order in round ``round_``: rotated by the round, and reversed in odd
    rounds, so that each variant runs both before and after each of its neighbours. Why
    (2026-12-07): with rotation alone the prior-only variant always ran right after LDWP +
    IAWP, whose service may still be training on that run's feedback, and over nine rounds it
    made 1.09x [1.02, 1.17] less on mostly the same decisions.

    >>> round_order(list("abcd"), 0), round_order(list("abcd"), 1)
    (['a', 'b', 'c', 'd'], ['a', 'd', 'c', 'b'])
    """
    shift = round_ % len(variants) if variants else 0
    rotated = variants[shift:] + variants[:shift]
    return rotated if round_ % 2 == 0 else rotated[::-1]


def service_health(url: str) -> dict | None:
    """A benchmark service's ``/health`` at the end of the invocation (what its learner
    published, held, refused and tried: the versions' index alone does not say why a service
    published nothing), or None when it does not answer. Not ``PlacementClient.health``:
    that client reads answers up to a model file's size (65 MiB), a health answer 1 MiB."""
    import urllib.request
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            return json.loads(response.read(1 << 20))
    except Exception as exc:  # noqa: BLE001 - a benchmark's record, not its result
        print(f"service /health at {url} not read: {exc}", flush=True)
        return None


def ensure_taskmanagers(cluster, expected: int = len(NODES)) -> bool:
    """Restart the cluster when a TaskManager is gone; True when it did. Why: PyFlink 2.2.1
    sometimes kills a TaskManager while cancelling a Python job ("FATAL - exception in
    exception handler ... Reference count must not be negative" in Beam's bundle factory),
    seen about once in 15 cancellations here; the next job would then never get its
    resources. A dead process is seen at once; REST only after the heartbeat timeout."""
    try:
        alive = len(_rest(cluster.rest_url).get("/taskmanagers")["taskmanagers"])
    except Exception:  # noqa: BLE001 - REST down counts as gone
        alive = 0
    running = sum(1 for tm in cluster.status().taskmanagers if tm.running)
    if alive >= expected and running >= expected:
        return False
    print(f"{min(alive, running)} of {expected} TaskManagers alive: restarting the cluster",
          flush=True)
    cluster.stop()
    cluster.start()
    return True


def run_complete(cfg, cluster, script: Path, records: list[bytes], warmup: list[bytes],
                 tag: str, hook_env: dict, timeout_s: float, extra_args: tuple = (),
                 nodes: tuple = NODES, warm_jit_us: float = 0.0,
                 vertex_time_s: float = 0.0) -> dict:
    """:func:`one_run`, once more on a restarted cluster when a TaskManager died under the
    run (not every output came): a run on a broken cluster measures the crash, not the
    placement. The row says whether it was retried."""
    row = one_run(cfg, cluster, script, records, warmup, tag, hook_env, timeout_s, extra_args,
                  nodes, warm_jit_us, vertex_time_s)
    if row["outputs"] >= row["records"]:
        return dict(row, retried=False)
    print(f"run {tag}: {row['outputs']}/{row['records']} outputs; retrying on a restarted "
          "cluster", flush=True)
    cluster.stop()
    cluster.start()
    row = one_run(cfg, cluster, script, records, warmup, f"{tag}-retry", hook_env, timeout_s,
                  extra_args, nodes, warm_jit_us, vertex_time_s)
    return dict(row, retried=True)


def one_run(cfg, cluster, script: Path, records: list[bytes], warmup: list[bytes], tag: str,
            hook_env: dict, timeout_s: float, extra_args: tuple = (),
            nodes: tuple = NODES, warm_jit_us: float = 0.0,
            vertex_time_s: float = 0.0) -> dict:
    """Submit the job ``script`` on fresh topics, warm it up, send ``records`` at once, read
    every output (read_committed); cancel the job. ``warm_jit_us`` > 0: after ``warmup``, send
    it again (renamed) until the JVMs' JIT compilers spend less than this per record over one
    batch, at most ``WARM_BATCHES`` times. ``vertex_time_s`` > 0: sample every operator's time
    shares at that interval (:mod:`benchmarks.vertex_time`; off by default: its requests take
    CPU from a machine the job already keeps busy)."""
    from benchmarks import process_cpu
    from benchmarks.flink_e2e import router_gauges
    from streamplace.jars import flink_connector_jar
    from streamplace.kafka_io import produce_raw, read_topic
    from streamplace.topics import create_topics
    restarted = ensure_taskmanagers(cluster, len(nodes))
    topics = {k: f"bx-{tag}-{k}" for k in ("in", "out", "dlq")}
    create_topics(cfg, [topics["in"], topics["dlq"], hook_env.get("FEEDBACK_TOPIC", "feedback")])
    # the broker stamps each output when the job's sink writes it (before its transaction
    # commits): the rate through the job, apart from when the checkpoints let it commit
    create_topics(cfg, [topics["out"]], topic_config=APPEND_TIME)
    with hook_environment(hook_env):
        job_id = cluster.submit_python_job(script, [*extra_args,
            "--bootstrap-servers", cfg.kafka.bootstrap_servers,
            "--connector-jar", str(flink_connector_jar(cfg)), "--input-topic", topics["in"],
            "--output-topic", topics["out"], "--dead-letter-topic", topics["dlq"],
            "--job-name", f"bx-{tag}"])
    try:
        cluster.wait_job_state(job_id, {"RUNNING"}, timeout_s=180)
        produce_raw(cfg, topics["in"], warmup)
        read_topic(cfg, topics["out"], None, expected=len(warmup), timeout_s=timeout_s,
                   idle_s=300)
        warmed, warm_jit = len(warmup), []
        for batch in range(WARM_BATCHES if warm_jit_us > 0 else 0):
            before = process_cpu.thread_snapshot(cluster)
            produce_raw(cfg, topics["in"], [b"%d-%s" % (batch, w) for w in warmup])
            warmed += len(warmup)
            read_topic(cfg, topics["out"], None, expected=warmed, timeout_s=timeout_s,
                       idle_s=300)
            warm_jit.append(process_cpu.compiler_us_per_record(process_cpu.thread_usage(
                before, process_cpu.thread_snapshot(cluster), len(warmup))))
            if warm_jit[-1] < warm_jit_us:
                break
        with host_load(cluster) as load, vertex_time(cluster, job_id, vertex_time_s) as times:
            cpu_before = process_cpu.snapshot(cluster)
            threads_before = process_cpu.thread_snapshot(cluster)
            python_before = process_cpu.python_thread_snapshot(cluster)
            sent_at = time.time()
            report = produce_raw(cfg, topics["in"], records)
            assert report.errors == [], report.errors[:3]
            # idle_s: a job that died under the run (no output for two minutes) ends the wait
            outputs = read_topic(cfg, topics["out"], None, expected=warmed + len(records),
                                 timeout_s=timeout_s, stamp_seen=True, settle_s=3,
                                 idle_s=120, stamp_appended=True).records
            cpu = process_cpu.usage(cpu_before, process_cpu.snapshot(cluster), len(records))
            # the Python that ran on the records' own threads (the per-record path) and the rest
            cpu.update(process_cpu.record_thread_usage(
                python_before, process_cpu.python_thread_snapshot(cluster), len(records)))
            # which JVM threads the CPU went to, per kind (source, router, sink, Kafka, GC...);
            # the JIT compilers' share says how far the JVMs were from warm
            threads = process_cpu.thread_usage(
                threads_before, process_cpu.thread_snapshot(cluster, full_names=True),
                len(records))
            cpu["jit_us_per_record"] = process_cpu.compiler_us_per_record(threads)
            cpu["jvm_threads"] = threads[:15]
        dead = read_topic(cfg, topics["dlq"], "DeadLetter", expected=None, timeout_s=10,
                          idle_s=3).records
        gauges = router_gauges(cluster.rest_url, job_id)
        checkpoints = checkpoint_summary(cluster.rest_url, job_id)
        where = operator_hosts(cluster.rest_url, job_id)
    finally:
        cluster.cancel_job(job_id)
        time.sleep(2)  # a TaskManager that the cancellation kills is gone within this
        ensure_taskmanagers(cluster, len(nodes))
    seen = sorted(r["_seen_s"] for r in outputs[warmed:])
    measured = len(seen)
    span = max(1e-6, seen[-1] - sent_at) if seen else float("nan")
    latencies = sorted(t - sent_at for t in seen)
    # every warm-up output was read before sending, so the newest append is a measured record's
    written = max((o["_appended_s"] for o in outputs if o.get("_appended_s")), default=None)
    routed = {n: int(gauges.get(f"streamplace_routed_{n}", 0)) for n in nodes}
    return {"records": len(records), "outputs": measured, "dead_letters": len(dead),
            "duplicates": len(outputs) - len({o["value"] for o in outputs}),
            "records_per_s": measured / span, "seconds": span,
            # records / (the last output written, by the broker's clock - sending): the rate
            # through the job without the wait for the checkpoint that commits the last outputs
            "written_records_per_s": measured / max(1e-6, written - sent_at)
            if written and measured else None,
            "first_output_s": latencies[0] if latencies else None,
            # outputs per second once they flow: separates processing from the time before
            # the first commit (a checkpoint must complete before a transactional sink commits)
            # (none when they came in fewer than about two commits: no rate to speak of)
            "processing_records_per_s": (measured - 1) / (seen[-1] - seen[0])
            if measured > 1 and seen[-1] - seen[0] >= MIN_RATE_SPAN_S else None,
            "checkpoint_e2e_ms": checkpoints, "operator_hosts": where,
            # records the job ran before the measured ones, and the JIT's µs a record in each
            # extra warm-up batch (warm_jit_us)
            "warmup_records": warmed, "warmup_jit_us_per_record": warm_jit,
            # the TaskManagers' JVM and Python CPU per record over the run (process_cpu)
            "process_cpu": cpu,
            # each host's CPU over its quota and throttled share, sending to the last output
            "host_load": load.window(sent_at, seen[-1]) if seen and load else {},
            # each operator's busy / idle / back-pressured share over the same span (Flink's
            # subtask metrics, benchmarks.vertex_time): a router blocked on one full channel
            "vertex_time": times.window(sent_at, seen[-1]) if seen and times else {},
            "vertex_time_error": times.error if times else "",
            "p50_commit_s": latencies[len(latencies) // 2] if latencies else None,
            "p99_commit_s": latencies[int(0.99 * (len(latencies) - 1))] if latencies else None,
            "routed": routed, "decision_p99_us": gauges.get("streamplace_decision_p99_us"),
            "decision_compiled": gauges.get("streamplace_decision_compiled"),
            # p99 per phase of the decision and of its thread CPU time (decision_timing)
            "decision_phases_p99_us": decision_phases(gauges),
            "fallback_decisions": gauges.get("streamplace_fallback_decisions"),
            "router_gauges": gauges,   # all of them: feedback records, measured slowness, ...
            "cluster_restarted_before": restarted,
            "model_version": gauges.get("streamplace_model_version")}


def prior_model_file(spec: str, folder: Path) -> Path:
    """The service's starting weights for ``spec``'s cluster (the untrained residual: its
    correction is zero, so it decides by its prior alone, MCT's completion estimate at the
    router's learned costs), written to ``folder`` as ``ldwp_prior_<spec>.spm``."""
    from benchmarks.flink_e2e import load_spec
    from placement.ldwp.agent import LDWPPolicy
    from placement.measured_costs import MeasuredCosts
    from placement.service.learner import learning_settings, to_cluster_spec
    from workload.estimates import CostModel
    cluster = to_cluster_spec(load_spec(spec), "t4")
    path = folder / f"ldwp_prior_{Path(spec).stem}.spm"
    folder.mkdir(parents=True, exist_ok=True)
    LDWPPolicy(cluster, MeasuredCosts(cluster, prior=CostModel()), learning_settings()).save(path)
    return path


def frozen_variant(variant: tuple[str, dict], model_file: str) -> tuple[str, dict]:
    """``variant`` with ``model_file`` as its frozen model (unchanged when ``model_file`` is
    empty); the label names the file so a JSON never mixes two models under one label."""
    if not model_file or not variant[0].startswith(FROZEN_LABEL):
        return variant
    path = Path(model_file).resolve()
    if not path.is_file():
        raise SystemExit(f"--frozen-model {model_file}: no such file")
    label, env = variant
    return f"{FROZEN_LABEL} ({path.name}, no service)", dict(env, INITIAL_MODEL=str(path))


def decision_phases(gauges: dict) -> dict[str, float]:
    """``{phase: p99 µs}`` from the router's ``streamplace_decision_<phase>_p99_us`` gauges
    (``pyflink_jobs.decision_timing``: lock, observation, policy, bookkeeping, cpu)."""
    prefix, suffix = "streamplace_decision_", "_p99_us"
    return {name[len(prefix):-len(suffix)]: value for name, value in sorted(gauges.items())
            if name.startswith(prefix) and name.endswith(suffix) and name != prefix + "p99_us"}


@contextmanager
def vertex_time(cluster, job_id: str, interval_s: float = 1.0):
    """A running :class:`benchmarks.vertex_time.VertexTime` for the job's vertices, or None
    when ``interval_s`` is 0 or they cannot be listed (a diagnosis, never a failed run)."""
    from benchmarks.vertex_time import VertexTime
    if interval_s <= 0:
        yield None
        return
    try:
        vertices = vertex_names(cluster.rest_url, job_id)
    except Exception:  # noqa: BLE001 - see the docstring
        yield None
        return
    with VertexTime(_rest(cluster.rest_url), job_id, vertices, interval_s) as sampler:
        yield sampler


@contextmanager
def host_load(cluster, interval_s: float = 0.5):
    """A running :class:`benchmarks.host_load.HostLoad` on emulated hosts, else None."""
    if not cluster.isolation.emulated:
        yield None
        return
    from benchmarks.host_load import HostLoad
    from streamplace.hosts.telemetry import HostTelemetry
    with HostLoad(HostTelemetry(cluster.hosts.hosts), interval_s) as load:
        yield load


def start_engines(broker, cluster) -> None:
    """Stop what an earlier run left, then start the broker and the cluster; a start that
    fails stops both again (a TaskManager that never registered must not outlive the
    benchmark) and raises."""
    broker.stop(), cluster.stop()
    try:
        broker.start()
        cluster.start()
    except BaseException:
        cluster.stop()
        broker.stop()
        raise


def summarise(rows: list[dict], variants) -> list[dict]:
    """Per variant: mean and 95% CI of each measure over its runs (None when no run has it),
    with the whole machine's busy CPU share from the runs' ``host_load`` (emulated hosts)."""
    def stat(label, key):
        values = [x[key] for x in rows if x["variant"] == label and x.get(key)]
        return confidence(values) if values else None

    def machine(label):
        values = [x["host_load"]["machine_busy_share"] for x in rows if x["variant"] == label
                  and (x.get("host_load") or {}).get("machine_busy_share") is not None]
        return confidence(values) if values else None
    return [{"variant": label, **{key: stat(label, key) for key in (
        "records_per_s", "p99_commit_s", "first_output_s", "processing_records_per_s",
        "written_records_per_s")}, "machine_busy_share": machine(label)}
        for label, _ in variants]


def service_access(cluster, spec) -> tuple[dict, dict]:
    """(``STREAMPLACE_HOOK_*`` values, the service's binding) for a cluster: on emulated hosts
    the jobs run inside the hosts' namespaces, where loopback is their own, so the service
    binds the head address with a token; ``spec`` (a name, or False for the default) tells the
    hooked jobs which cluster spec their nodes and links come from."""
    env = {"CLUSTER_SPEC": spec} if spec else {}
    plan = cluster.isolation
    if not plan.emulated:
        return env, {}
    import secrets
    token = secrets.token_hex(16)
    return dict(env, SERVICE_TOKEN=token), {"host": plan.head_address, "token": token}


def verdict(summary: list[dict]) -> dict:
    """The issue's goals from the summary: LDWP + IAWP against Flink's default distribution,
    the plain job (Flink places its map) and MCT at measured speeds; batching on against off."""
    means = {s["variant"]: (s["records_per_s"] or {}).get("mean") for s in summary}
    ldwp = means.get("LDWP + IAWP")

    def ratio(label):
        other = means.get(label)
        return ldwp / other if ldwp and other else None
    plain = next((label for label in means if label.startswith("plain job")), None)
    return {"ldwp_over_flink_default_distribution": ratio(VARIANTS[0][0]),
            "ldwp_over_plain_job": ratio(plain) if plain else None,
            "ldwp_over_mct": ratio("MCT at measured speeds"),
            "batching_on_over_off": ratio("LDWP + IAWP, batching off")}


#: (name, variant, baseline) of the paired ratios a result reports (:func:`paired_ratios`)
PAIRED = (("ldwp_over_flink_default_distribution", "LDWP + IAWP", VARIANTS[0][0]),
          ("ldwp_over_mct", "LDWP + IAWP", "MCT at measured speeds"),
          ("ldwp_over_its_prior_served", "LDWP + IAWP", PRIOR_SERVICE_LABEL),
          ("mct_over_flink_default_distribution", "MCT at measured speeds", VARIANTS[0][0]))


def paired_ratios(rows: list[dict]) -> dict:
    """Each :data:`PAIRED` ratio paired by round: per round, the variant's committed
    outputs/s over the baseline's in the same round; their geometric mean and 95% interval
    (a t-interval on the log ratios; none from one round). Why: the machine's speed moves
    between rounds by as much as placements differ (the same decisions 1.14x apart on the
    means, 2026-12-07), and both variants of a round share it, so a ratio within rounds is
    less noisy than a ratio of means. A variant counts under its label or its label and a
    parenthesis (the prior-only variant's has one), not an ablation's ("LDWP + IAWP, batching
    off"); rounds missing either side are skipped."""
    from benchmarks.baselines import confidence_interval

    def rate(label: str, round_: int) -> float | None:
        found = [r["records_per_s"] for r in rows if r.get("round") == round_
                 and (r.get("variant") == label
                      or str(r.get("variant", "")).startswith(label + " ("))
                 and isinstance(r.get("records_per_s"), (int, float))
                 and math.isfinite(r["records_per_s"]) and r["records_per_s"] > 0]
        return found[0] if len(found) == 1 else None

    out = {}
    rounds = sorted({r.get("round") for r in rows if isinstance(r.get("round"), int)})
    for name, variant, baseline in PAIRED:
        logs = [math.log(a / b) for a, b in ((rate(variant, n), rate(baseline, n))
                                             for n in rounds) if a and b]
        if not logs:
            continue
        mean, low, high = confidence_interval(logs)
        out[name] = {"geometric_mean": math.exp(mean),
                     "ci95": [math.exp(low), math.exp(high)] if len(logs) > 1 else None,
                     "per_round": [math.exp(x) for x in logs]}
    return out


def checkpoint_summary(rest_url: str, job_id: str) -> dict:
    """The job's checkpoint durations so far (Flink REST): completed, failed, p50/p95/max
    end-to-end ms. With a backlog, a checkpoint that cannot complete holds every output of
    an exactly-once sink back; this says how long that was."""
    try:
        body = _rest(rest_url).get(f"/jobs/{job_id}/checkpoints")
    except Exception:  # noqa: BLE001 - REST down: no numbers, not no run
        return {}
    e2e = (body.get("summary") or {}).get("end_to_end_duration") or {}
    counts = body.get("counts") or {}
    return {"completed": counts.get("completed"), "failed": counts.get("failed"),
            "p50": e2e.get("p50"), "p95": e2e.get("p95"), "max": e2e.get("max"),
            "slowest": slowest_checkpoint(rest_url, job_id, body.get("history") or [])}


def slowest_checkpoint(rest_url: str, job_id: str, history: list) -> dict:
    """Where the slowest completed checkpoint in Flink's history (``web.checkpoints.history``
    entries) spent its time, per operator (the slowest subtask of each), in ms: ``start_delay``
    is how long the barrier took to reach the operator (queued records ahead of it),
    ``alignment`` the wait for the barrier on its other inputs, ``sync``/``async`` the
    snapshot itself (a Python operator's sync part includes finishing its bundle)."""
    done = [h for h in history if h.get("status") == "COMPLETED"]
    if not done:
        return {}
    worst = max(done, key=lambda h: h.get("end_to_end_duration") or 0)
    out = {"id": worst.get("id"), "end_to_end_ms": worst.get("end_to_end_duration"),
           "operators": {}}
    try:
        for vertex, name in vertex_names(rest_url, job_id).items():
            summary = _rest(rest_url).get(f"/jobs/{job_id}/checkpoints/details/"
                                          f"{worst['id']}/subtasks/{vertex}"
                                          ).get("summary") or {}
            duration = summary.get("checkpoint_duration") or {}
            out["operators"][name] = {
                "end_to_end_ms": (summary.get("end_to_end_duration") or {}).get("max"),
                "start_delay_ms": (summary.get("start_delay") or {}).get("max"),
                "alignment_ms": ((summary.get("alignment") or {}).get("duration") or {})
                .get("max"),
                "sync_ms": (duration.get("sync") or {}).get("max"),
                "async_ms": (duration.get("async") or {}).get("max")}
    except Exception as exc:  # noqa: BLE001 - a diagnosis, never a failed run
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def plot(summary: list[dict], example: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True,
                             gridspec_kw={"width_ratios": [3, 2]})
    labels = [s["variant"] for s in summary]
    colours = ["#2a7f62" if "LDWP" in label else "#cccccc" if "plain" in label else "#999999"
               for label in labels]
    for ax, key, title in ((axes[0], "records_per_s", "committed outputs / s (mean, 95% CI)"),
                           (axes[1], "first_output_s", "first committed output after "
                                                       "sending (s)")):
        stats = [s.get(key) or {"mean": 0.0, "ci95": [0.0, 0.0]} for s in summary]
        means = [st["mean"] for st in stats]
        errs = [[max(0.0, m - st["ci95"][0]) for m, st in zip(means, stats)],
                [max(0.0, st["ci95"][1] - m) for m, st in zip(means, stats)]]
        ax.barh(labels, means, xerr=errs, capsize=4, color=colours)
        ax.set_xlabel(title)
    axes[0].invert_yaxis()
    fig.suptitle(f"examples/{example}: hooked job per placement", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_overhead(summary: list[dict], title: str, path: Path) -> None:
    """--overhead's PNG: each job's records/s (mean, 95% CI) and where its CPU a record went
    (Python on the records' threads, other Python, the JVMs apart from the JIT, the JIT)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._common import bar_with_ci
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.9 * len(summary) + 2.2))
    labels = [s["variant"] for s in summary]
    rows = [(f"{label}, committed", s["records_per_s"]) for label, s in zip(labels, summary)]
    rows += [(f"{label}, written", s["written_records_per_s"])
             for label, s in zip(labels, summary) if s.get("written_records_per_s")]
    bar_with_ci(axes[0], [r[0] for r in rows], [r[1]["mean"] for r in rows],
                [r[1]["ci95"] for r in rows], horizontal=True)
    axes[0].set_xlabel("records / s (mean, 95% CI); written: before the commit")
    parts = (("Python, records' threads", lambda s: s["record_thread_us_per_record"]["mean"],
              "#2a7f62"),
             ("Python, other threads", lambda s: max(
                 0.0, s["python_us_per_record"]["mean"] - s["record_thread_us_per_record"]["mean"]),
              "#8fc9b5"),
             ("JVMs without the JIT", lambda s: max(
                 0.0, s["jvm_us_per_record"]["mean"] - s["jit_us_per_record"]["mean"]), "#999999"),
             ("JIT compilers", lambda s: s["jit_us_per_record"]["mean"], "#dddddd"))
    left = [0.0] * len(summary)
    for name, part, colour in parts:
        widths = [part(s) for s in summary]
        axes[1].barh(labels, widths, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, widths)]
    axes[1].set_xlabel("CPU µs a record (means)")
    axes[1].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    for ax in axes:
        ax.invert_yaxis()
    axes[1].set_yticklabels([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def flink_conf_entries(entries: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings -> a dict; ValueError naming the first one without a key."""
    out = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--flink-conf wants KEY=VALUE, got {entry!r}")
        out[key.strip()] = value.strip()
    return out


def conf_suffix(flink_conf: dict[str, str]) -> str:
    """'' for no entries, else '_conf-' and 8 hex digits that depend only on the entries (the
    same command writes the same file; different settings never overwrite each other)."""
    if not flink_conf:
        return ""
    digest = hashlib.sha1(json.dumps(flink_conf, sort_keys=True).encode()).hexdigest()
    return f"_conf-{digest[:8]}"


def main(argv=None) -> int:
    from benchmarks.flink_e2e import bench_config
    with exclusive_home(bench_config("default").home):
        return _main(argv)


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--example", default="text_inference",
                        choices=["text_inference", "video_analytics", "async_scoring"])
    parser.add_argument("--quick", action="store_true", help="1 round, fewer records")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=0, help="0: 6000 reviews / 300 clips")
    parser.add_argument("--only", default="",
                        help="variants whose label contains this (or any of these, "
                             "comma-separated)")
    parser.add_argument("--exclude", default="",
                        help="leave out the variants whose label contains this (or any of "
                             "these, comma-separated), after --only")
    parser.add_argument("--spec", default="default",
                        help="cluster spec: a shipped name (workload/specs) or a YAML path; "
                             "'hosts' runs on the emulated hosts (needs root; else the cpuset "
                             "fallback, recorded in the JSON)")
    parser.add_argument("--flink-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Flink configuration entry for the benchmark's cluster (repeat "
                             "for more); recorded in the JSON, and the output's name gains "
                             "'_conf-<hash of the entries>' so the default run's files stay")
    parser.add_argument("--router-host", default="",
                        help="run every hooked job's router (and its sources and sinks) on "
                             "this TaskManager (the hook's router_host); the output's name "
                             "gains '_router-<host>'")
    parser.add_argument("--hold-in-flight", type=float, default=HOLD_IN_FLIGHT,
                        help="the 'decided late' variants' depth: a router holds the next "
                             "record while every host holds this many times its share of the "
                             "executors' capacity (HookSettings.hold_in_flight)")
    parser.add_argument("--frozen-model", default="",
                        help="the model file of the 'LDWP frozen' ablation (default: the shipped "
                             "residual model), e.g. a version the service learned; 'prior': the "
                             "service's untrained starting weights (its prior alone)")
    parser.add_argument("--colocated", action=argparse.BooleanOptionalAction, default=True,
                        help="--overhead: also measure routing='colocated' (one router per "
                             "TaskManager, running what it keeps on its own node)")
    parser.add_argument("--shape-ablation", action="store_true",
                        help="--overhead: also the plain function as a two-input operator "
                             "beside a broadcast input (the router's shape, without the hook), "
                             "its outputs on the main output, then on a side output")
    parser.add_argument("--feedback-ablation", action="store_true",
                        help="--overhead: also the colocated routers with the feedback as "
                             "their broadcast input (router_feedback 'broadcast'), against "
                             "their default, each reading the feedback topic itself")
    parser.add_argument("--vertex-time", type=float, default=0.0, metavar="SECONDS",
                        help="sample every operator's busy / idle / back-pressured share at "
                             "this interval during each measured run (vertex_time in the JSON; "
                             "0: off, the default: its REST requests take CPU from the job). "
                             "Flink refreshes metrics every 10 s unless --flink-conf "
                             "metrics.fetcher.update-interval=1000")
    parser.add_argument("--overhead", action="store_true",
                        help="instead: the hook's own cost with a trivial operator against "
                             "rebalance(), both spread one instance per TaskManager")
    parser.add_argument("--routers", default="1,2",
                        help="--overhead: router parallelisms to measure, comma-separated")
    parser.add_argument("--warmup-records", type=int, default=20_000,
                        help="--overhead: records each job runs before the measured ones, and "
                             "the size of each extra warm-up batch (100 before 2026-12-04)")
    parser.add_argument("--warm-jit-us", type=float, default=5.0,
                        help="--overhead: send warm-up batches until the TaskManagers' JIT "
                             "compilers spend less than this many µs a record over one (at "
                             f"most {WARM_BATCHES}; 0: one batch only). A JVM still compiling "
                             "the job's code takes CPU the job will not need once warm")
    parser.add_argument("--python-mode", choices=("process", "thread"), default="process",
                        help="--overhead: the cluster's PyFlink python.execution-mode (thread: "
                             "writes flink_e2e_overhead_thread.json)")
    args = parser.parse_args(argv)
    if not args.vertex_time >= 0:   # also NaN
        parser.error("--vertex-time must be 0 (off) or a positive interval, "
                     f"got {args.vertex_time}")
    if args.overhead:
        return overhead(args)
    from benchmarks.flink_e2e import DEFAULT_SPEC, bench_config, load_spec, spec_record
    from placement.service import PlacementService, ServiceSettings
    from streamplace.flink_cluster import FlinkCluster
    from streamplace.kafka_broker import KafkaBroker
    nodes = tuple(tm.id for tm in load_spec(args.spec).taskmanagers)
    if args.router_host and args.router_host not in nodes:
        parser.error(f"--router-host {args.router_host!r} is none of the spec's TaskManagers "
                     f"{list(nodes)}")
    # 6,000 reviews: with 3,000 the seconds before the first commit were most of a run
    count = args.records or (300 if args.example == "video_analytics" else 6000)
    runs = 1 if args.quick else args.runs
    if args.quick:
        count //= 3
    wanted = args.only.split(",")
    if args.frozen_model == "prior":
        args.frozen_model = str(prior_model_file(args.spec, ROOT / ".streamplace" / "bench"))
    variants = [v for v in VARIANTS if any(part in v[0] for part in wanted)] + \
        [frozen_variant(v, args.frozen_model) for v in EXTRA_VARIANTS
         if args.only and any(part in v[0] for part in wanted)] + \
        [("plain job (Flink places its map; see docstring)", None)]
    unwanted = [part for part in args.exclude.split(",") if part]
    variants = [v for v in variants if not any(part in v[0] for part in unwanted)]
    variants = [(label, dict(env, HOLD_IN_FLIGHT=f"{args.hold_in_flight:g}"))
                if env and "HOLD_IN_FLIGHT" in env else (label, env) for label, env in variants]
    cfg = bench_config("default", args.spec)
    flink_conf = flink_conf_entries(args.flink_conf)
    cfg.flink.extra_config.update(flink_conf)
    broker, cluster = KafkaBroker(cfg), FlinkCluster(cfg)
    start_engines(broker, cluster)
    service_env, binding = service_access(cluster, args.spec != DEFAULT_SPEC and args.spec)
    # a fresh feedback topic too: a new service group reads a topic from its start, so the
    # shared "feedback" topic fed it every earlier invocation's feedback, other clusters' too
    feedback_topic = f"bx-feedback-{time.time_ns()}"
    service_env = dict(service_env, FEEDBACK_TOPIC=feedback_topic)
    from streamplace.topics import create_topics
    create_topics(cfg, [feedback_topic])   # before the service subscribes to it

    def bench_service(group: str, models: str, **settings) -> PlacementService:
        # a fresh group and store per invocation: a service must not resume a model that
        # earlier invocations trained on other clusters (it did: version 6,437 on the hosts)
        return PlacementService(ServiceSettings(
            port=0, bootstrap_servers=cfg.kafka.bootstrap_servers, feedback_topic=feedback_topic,
            group_id=f"{group}-{time.time_ns()}", flink_rest_url=cluster.rest_url,
            cluster_spec=cfg.flink.cluster_spec,
            model_dir=str(cfg.home / models / str(time.time_ns())), **settings, **binding))

    # the first version after the service's default 1,000 records: the burst check judges
    # versions on at least that many tasks and holds them till then (2026-12-06)
    service = bench_service("bx-service", "bx-models", publish_every=300)
    service.start()
    prior_service = None
    if any(label.startswith(PRIOR_SERVICE_LABEL) for label, _ in variants):
        prior_service = bench_service("bx-prior-service", "bx-prior-models",
                                      min_records_first_version=NEVER,
                                      learning={"learning_starts": NEVER})
        prior_service.start()
    plan = cluster.isolation
    isolation = {"mode": plan.mode, "reason": plan.reason, "emulated": plan.emulated}
    print(f"cluster spec {args.spec}: isolation {plan.mode}"
          + (f" ({plan.reason})" if plan.reason else ""), flush=True)
    rows = []
    name = f"flink_e2e_{args.example}" + ("" if args.spec == DEFAULT_SPEC else
                                          f"_{Path(args.spec).stem}") + \
        ("_quick" if args.quick else "") + conf_suffix(flink_conf) + \
        (f"_router-{args.router_host}" if args.router_host else "") + \
        (f"_frozen-{Path(args.frozen_model).stem}" if args.frozen_model and any(
            label.startswith(FROZEN_LABEL) for label, _ in variants) else "")
    try:
        warmup = records_for(args.example, 30, seed=99, prefix="warm")
        # One throwaway run first: the first job on a fresh cluster pays one-off costs (JVM
        # warm-up, Python environments) that would otherwise count against round 1's first
        # variant (observed: 236 rec/s against about 370 for the same routing later).
        one_run(cfg, cluster, ROOT / "examples" / args.example / "hooked_job.py",
                records_for(args.example, count // 3, seed=98, prefix="throwaway"), warmup,
                f"{args.example[:5]}-throwaway-{time.time_ns() % 10**6}",
                dict(service_env, POLICY="round_robin", SERVICE_URL=service.url),
                timeout_s=900, nodes=nodes)
        for r in range(runs):
            records = records_for(args.example, count, seed=r, prefix=f"r{r}")
            order = round_order(variants, r)
            for label, env in order:
                # a variant's own SERVICE_URL ("" = none) wins over the benchmark's service
                hook_env = {"SERVICE_URL": service.url, **service_env, **(env or {})}
                if hook_env["SERVICE_URL"] == PRIOR_SERVICE_URL:
                    hook_env["SERVICE_URL"] = prior_service.url
                if args.router_host:
                    hook_env["ROUTER_HOST"] = args.router_host
                script = "plain_job.py" if env is None else "hooked_job.py"
                tag = f"{args.example[:5]}-{r}-{len(rows)}-{time.time_ns() % 10**6}"
                row = run_complete(cfg, cluster, ROOT / "examples" / args.example / script,
                                   records, warmup, tag, hook_env, timeout_s=900,
                                   nodes=nodes, vertex_time_s=args.vertex_time)
                row.update(variant=label, round=r)
                rows.append(row)
                write_result(f"{name}.partial", {"runs": rows})
                print(f"round {r + 1}/{runs} {label:46s} {row['records_per_s']:7.1f} rec/s  "
                      f"outputs {row['outputs']}/{row['records']}  routed {row['routed']}",
                      flush=True)
    finally:
        health = {"learning": service_health(service.url)}
        service.stop()
        if prior_service is not None:
            health["prior_only"] = service_health(prior_service.url)
            prior_service.stop()
        cluster.stop()
        broker.stop()
    summary = summarise(rows, variants)
    (RESULTS / f"{name}.partial.json").unlink(missing_ok=True)
    write_result(name, {"example": args.example, "records": count, "rounds": runs,
                        "cluster_spec": spec_record(args.spec), "isolation": isolation,
                        "flink_conf": flink_conf, "router_host": args.router_host or None,
                        "summary": summary, "service_health": health,
                        "verdict": verdict(summary), "paired": paired_ratios(rows),
                        "runs": rows})
    plot(summary, args.example, RESULTS / f"{name}.png")
    for s in summary:
        ci = s["records_per_s"]["ci95"]
        flowing = s["processing_records_per_s"]
        print(f"{s['variant']:46s} {s['records_per_s']['mean']:7.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"
              f"  first output {s['first_output_s']['mean']:.1f} s" +
              (f", then {flowing['mean']:.0f} rec/s" if flowing else "") +
              (f", machine busy {busy['mean']:.2f}" if (busy := s["machine_busy_share"])
               else ""))
    return 0


def cpu_costs_without_jit(summary: list[dict]) -> tuple[dict, dict]:
    """(CPU µs a record without the JIT compilers per variant, and each later variant's cost
    against the first: 1 - first's CPU / its CPU) from :func:`overhead`'s summary rows.

    The JIT compilers never went quiet within the warm-up (5-30 µs a record after 220,000
    records) and spend differently on the two jobs: CPU a record without them is what each job
    would spend once compiled, and where the rate is bound by CPU, the hook's cost then."""
    steady = {s["variant"]: s["python_us_per_record"]["mean"] + s["jvm_us_per_record"]["mean"]
              - s["jit_us_per_record"]["mean"] for s in summary}
    first = summary[0]["variant"]
    return steady, {label: 1.0 - steady[first] / cpu if cpu > 0 else float("nan")
                    for label, cpu in steady.items() if label != first}


def overhead(args) -> int:
    """``benchmarks/jobs/passthrough_job.py`` with and without ``--hook`` on a cluster whose
    ``taskmanager.load-balance.mode: TASKS`` spreads the plain job's 3 map instances one per
    TaskManager, as the hook pins its 3 executors; light records, alternating order."""
    from benchmarks.flink_e2e import bench_config
    from streamplace.flink_cluster import FlinkCluster
    from streamplace.kafka_broker import KafkaBroker
    count = args.records or (6000 if args.quick else 20_000)
    runs = 1 if args.quick else args.runs
    cfg = bench_config("tasks_mode")
    cfg.flink.python_execution_mode = args.python_mode
    broker, cluster = KafkaBroker(cfg), FlinkCluster(cfg)
    start_engines(broker, cluster)
    script = ROOT / "benchmarks" / "jobs" / "passthrough_job.py"
    routers = [int(n) for n in args.routers.split(",") if n.strip()]
    variants = [("rebalance() + map (Flink)", (), {})] + [
        (f"hook (round-robin, {n} router{'s' if n > 1 else ''})", ("--hook",),
         {"ROUTER_PARALLELISM": str(n)}) for n in routers] + [
        ("hook (colocated routers)", ("--hook",), {"ROUTING": "colocated"})
        for _ in range(1 if args.colocated else 0)] + [
        ("hook (colocated routers, broadcast feedback)", ("--hook",),
         {"ROUTING": "colocated", "ROUTER_FEEDBACK": "broadcast"})
        for _ in range(1 if args.colocated and args.feedback_ablation else 0)] + [
        ("connect(broadcast) + process (Flink)", ("--plain-shape", "broadcast"), {})
        for _ in range(1 if args.shape_ablation else 0)] + [
        ("connect(broadcast) + process, side output (Flink)", ("--plain-shape", "side-output"),
         {}) for _ in range(1 if args.shape_ablation else 0)]
    rows = []
    try:
        warmup = [f"warm-{i}".encode() for i in range(max(1, args.warmup_records))]
        for r in range(runs):
            records = [json.dumps({"n": i, "r": r}).encode() for i in range(count)]
            for label, extra, hook_env in (variants if r % 2 == 0 else variants[::-1]):
                tag = f"ovh-{r}-{len(rows)}-{time.time_ns() % 10**6}"
                row = run_complete(cfg, cluster, script, records, warmup, tag,
                                   {"POLICY": "round_robin", **hook_env}, timeout_s=600,
                                   extra_args=extra, warm_jit_us=args.warm_jit_us)
                row.update(variant=label, round=r)
                rows.append(row)
                print(f"round {r + 1}/{runs} {label:28s} {row['records_per_s']:8.1f} rec/s, "
                      f"CPU per record: Python {row['process_cpu']['python_us_per_record']:.1f}"
                      f" us, JVMs {row['process_cpu']['jvm_us_per_record']:.1f} us (JIT "
                      f"{row['process_cpu']['jit_us_per_record']:.1f}); warmed on "
                      f"{row['warmup_records']} records, JIT by batch "
                      f"{row['warmup_jit_us_per_record']}", flush=True)
    finally:
        cluster.stop()
        broker.stop()
    summary = [{"variant": label, **{key: confidence(
        [(x[key] or 0.0) if key in RUN_RATES else x["process_cpu"].get(key, 0.0)
         for x in rows if x["variant"] == label])
        for key in (*RUN_RATES, "python_us_per_record", "jvm_us_per_record",
                    "jit_us_per_record", "record_thread_us_per_record",
                    "other_threads_us_per_record")}}
        for label, _, _ in variants]
    plain = summary[0]["records_per_s"]["mean"]
    costs = {s["variant"]: 1.0 - s["records_per_s"]["mean"] / plain for s in summary[1:]}
    plain_written = summary[0]["written_records_per_s"]["mean"]
    written_costs = {s["variant"]: 1.0 - s["written_records_per_s"]["mean"] / plain_written
                     for s in summary[1:]} if plain_written else {}
    steady, costs_without_jit = cpu_costs_without_jit(summary)
    name = ("flink_e2e_overhead" + ("" if args.python_mode == "process" else "_thread")
            + ("_colocated" if args.colocated and not routers else "")
            + ("_shapes" if args.shape_ablation else "")
            + ("_feedback" if args.feedback_ablation else "")
            + ("_quick" if args.quick else ""))
    plot_overhead(summary, f"the hook's cost with a trivial operator, {runs} rounds, "
                  f"{args.python_mode} mode" + ("" if args.python_mode == "process" else
                                               " (Python runs inside the JVMs)"),
                  RESULTS / f"{name}.png")
    write_result(name, {"records": count, "warmup_batch": len(warmup),
                        "warm_jit_us": args.warm_jit_us, "rounds": runs,
                        "summary": summary,
                        "python_execution_mode": args.python_mode, "runs": rows,
                        "routers": routers, "hook_cost": min(costs.values()),
                        "hook_cost_by_variant": costs,
                        "hook_cost_written": min(written_costs.values(), default=None),
                        "hook_cost_written_by_variant": written_costs,
                        "cpu_us_per_record_without_jit": steady,
                        "hook_cpu_cost_without_jit": costs_without_jit})
    for s in summary[1:]:
        print(f"{s['variant']}: {s['records_per_s']['mean']:.1f} vs rebalance {plain:.1f} "
              f"rec/s committed: the hook costs {100 * costs[s['variant']]:.1f}%; written "
              f"(before the commit) {s['written_records_per_s']['mean']:.1f} vs "
              f"{plain_written:.1f}: {100 * written_costs.get(s['variant'], float('nan')):.1f}%"
              f" (in CPU a record without the JIT compilers: "
              f"{100 * costs_without_jit[s['variant']]:.1f}%)")
    for s in summary:
        print(f"{s['variant']}: CPU per record: Python {s['python_us_per_record']['mean']:.1f} "
              f"us, TaskManager JVMs {s['jvm_us_per_record']['mean']:.1f} us, of which JIT "
              f"compilers {s['jit_us_per_record']['mean']:.1f} us"
              # (thread mode: Python runs inside the JVMs, there are no workers to count)
              + (f"; Python on the records' threads {s['record_thread_us_per_record']['mean']:.1f}"
                 f" us, on others {s['other_threads_us_per_record']['mean']:.1f} us"
                 if args.python_mode == "process" else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
