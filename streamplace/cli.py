"""``streamplace``: one CLI for the broker, the cluster, the jobs and the demo.

Heavy modules (pyflink, torch, confluent-kafka) are imported inside the subcommands that need
them, so ``streamplace --help`` starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

__all__ = ["main", "build_parser"]


def _config(args):
    from streamplace.config import load_config
    # --spec (cluster, up, down) wins over --set; the broker too must see an isolation: host
    # spec, whose head address it then listens on
    spec = [f"flink.cluster_spec={args.spec}"] if getattr(args, "spec", None) else []
    return load_config(args.config, list(args.set or []) + spec)


# -- kafka ---------------------------------------------------------------------------------------
def cmd_kafka(args) -> int:
    from streamplace.kafka_broker import KafkaBroker
    cfg = _config(args)
    broker = KafkaBroker(cfg)
    if args.action == "start":
        was_running = broker.status().running
        status = broker.start()
        print(("kafka: already running\n" if was_running else "") + str(status))
        if not args.no_topics:
            from streamplace.topics import ensure_topics
            created = ensure_topics(cfg)
            print(f"topics: created {created}" if created else "topics: all present")
    elif args.action == "stop":
        if broker.stop():
            print("kafka: stopped")
        else:
            print("kafka: was not running")
            stray = broker.untracked_lock_holder()
            if stray:  # never signalled: streamplace only stops what its PID file names
                print(f"kafka: but pid {stray} holds {broker.data_dir} (a broker streamplace "
                      f"has no PID file for); stop it yourself if it is yours: kill {stray}")
    elif args.action == "status":
        status = broker.status()
        print(status)
        return 0 if status.running else 3
    elif args.action == "topics":
        from streamplace.topics import ensure_topics, topic_definitions
        created = ensure_topics(cfg)
        for name, spec in topic_definitions(cfg).items():
            mark = "created" if name in created else "present"
            print(f"{name:14s} {spec['partitions']} partition(s) {mark:8s} {spec['description']}")
    return 0


# -- cluster -------------------------------------------------------------------------------------
def cmd_cluster(args) -> int:
    from streamplace.flink_cluster import FlinkCluster
    from streamplace.flink_hosts import with_host_addresses
    cfg = _config(args)
    if args.spec:
        cfg.flink.cluster_spec = args.spec
        cfg = with_host_addresses(cfg)  # an isolation: host spec moves the addresses
    cluster = FlinkCluster(cfg)
    if args.action == "start":
        print(cluster.isolation.describe())  # before the wait: which mode, and why
        print(cluster.start())
    elif args.action == "stop":
        stopped = cluster.stop()
        print(f"flink: stopped {', '.join(stopped)}" if stopped else "flink: nothing was running")
        if cluster.hosts_note:
            print(f"flink: {cluster.hosts_note}")
    elif args.action == "status":
        status = cluster.status()
        print(status)
        return 0 if status.jobmanager_running else 3
    return 0


# -- up / down -----------------------------------------------------------------------------------
def cmd_up(args) -> int:
    args.action, args.no_topics, args.spec = "start", False, getattr(args, "spec", None)
    return cmd_kafka(args) or cmd_cluster(args)


def cmd_down(args) -> int:
    args.action, args.spec = "stop", getattr(args, "spec", None)
    return cmd_cluster(args) or cmd_kafka(args)


# -- jars ----------------------------------------------------------------------------------------
def cmd_jars(args) -> int:
    from streamplace.jars import fetch_jars
    cfg = _config(args)
    path = fetch_jars(cfg, force=args.force, quiet=not args.verbose)
    for jar in sorted(path.rglob("*.jar")):
        if "kafka_2.13" in jar.name or "connector" in jar.name or "slf4j-impl" in jar.name:
            print(jar)
    return 0


# -- job -----------------------------------------------------------------------------------------
def cmd_job(args) -> int:
    from streamplace.flink_cluster import FlinkCluster
    from streamplace.jobs import submit_task_pipeline
    cfg = _config(args)
    cluster = FlinkCluster(cfg)
    if args.action == "run":
        return _run_user_job(cfg, cluster, args)
    if args.action == "submit":
        if args.hook:
            job_id = submit_task_pipeline(cfg, cluster, **_hook_settings(cfg, args))
        else:
            job_id = submit_task_pipeline(cfg, cluster, pin_executor_to=args.pin or "",
                                          executor_parallelism=args.parallelism,
                                          executor=args.executor)
        state = cluster.wait_job_state(job_id, {"RUNNING"})
        print(f"job {job_id} {state}; web UI: {cfg.flink.rest_url}/#/job/running/{job_id}/overview")
    elif args.action in ("watch", "replan"):
        return _supervise(cfg, cluster, args)
    elif args.action == "cancel":
        if not args.job_id:
            print("streamplace job: cancel needs the job id (streamplace job list)",
                  file=sys.stderr)
            return 2
        if cluster.rest.get_or_none("/overview") is None:
            print(f"streamplace job: no JobManager answers at {cfg.flink.rest_url}: nothing to "
                  "cancel", file=sys.stderr)
            return 3
        cluster.cancel_job(args.job_id)
        print(f"job {args.job_id}: cancel requested")
    elif args.action == "list":
        status = cluster.status()
        if not status.jobmanager_running:
            print(f"streamplace job: no JobManager answers at {cfg.flink.rest_url} "
                  "(streamplace cluster start)", file=sys.stderr)
            return 3
        for job in status.jobs:
            print(f"{job['jid']} {job['state']:10s} {job['name']}")
    return 0


def _run_user_job(cfg, cluster, args) -> int:
    """``streamplace job run my_job.py [-- its arguments]``: a user's own PyFlink script
    submitted to this cluster with ``flink run`` (client and Python workers on this
    interpreter). Its hook learns the cluster spec the cluster was started from, and the
    placement service of ``--service-url``, through ``STREAMPLACE_HOOK_*`` variables (one the
    caller set already wins); the script's own arguments go after ``--``."""
    from pathlib import Path
    script = Path(args.job_id or "")
    if not args.job_id or script.suffix != ".py" or not script.is_file():
        print(f"streamplace job run: needs the path of a PyFlink job's .py file, got "
              f"{args.job_id!r}", file=sys.stderr)
        return 2
    if cluster.rest.get_or_none("/overview") is None:
        print(f"streamplace job run: no JobManager answers at {cfg.flink.rest_url} "
              "(streamplace up)", file=sys.stderr)
        return 3
    hook_env = {"STREAMPLACE_HOOK_CLUSTER_SPEC": str(cfg.flink.cluster_spec)}
    if args.service_url:
        hook_env["STREAMPLACE_HOOK_SERVICE_URL"] = args.service_url
        hook_env["STREAMPLACE_HOOK_SERVICE_TOKEN"] = _service_token(cfg, args.service_url)
    job_id = cluster.submit_python_job(script.resolve(), list(args.script_args), timeout_s=300,
                                       default_env=hook_env)
    state = cluster.wait_job_state(job_id, {"RUNNING", "FINISHED"})
    print(f"job {job_id} {state}; web UI: {cfg.flink.rest_url}/#/job/running/{job_id}/overview")
    return 0


def _service_token(cfg, service_url: str) -> str:
    """The token a hook sends to ``service_url``: ``$STREAMPLACE_SERVICE_TOKEN``, the config's
    ``service.token``, else the one ``streamplace serve`` wrote under the home (none: "")."""
    import os

    from streamplace.config import ConfigError
    from streamplace.service_token import TokenFileError, read_token
    if not service_url:
        return ""
    token = os.environ.get("STREAMPLACE_SERVICE_TOKEN") or cfg.service.token
    if token:
        return token
    try:
        return read_token(cfg.home) or ""
    except TokenFileError as exc:
        raise ConfigError(str(exc)) from None


def _hook_settings(cfg, args, plan: dict | None = None, retired: dict | None = None) -> dict:
    plan_text = ",".join(f"{k}={v}" for k, v in plan.items()) if plan is not None else args.plan
    return {"placement": "hook", "executor": "iawp", "policy": args.policy,
            "service_url": args.service_url or "", "plan": plan_text or "",
            "service_token": _service_token(cfg, args.service_url or ""),
            "retired": ",".join(f"{k}={v}" for k, v in (retired or {}).items()),
            "topic_feedback": cfg.job.topic_feedback, "node_scheduler": args.scheduler,
            "rest_url": cfg.flink.rest_url}


def _supervise(cfg, cluster, args) -> int:
    """``job watch``: keep a hooked job on the live TaskManagers; ``job replan``: apply a plan."""
    import pyflink_jobs.task_pipeline as pipeline
    from pyflink_jobs.task_pipeline import parse_plan
    from streamplace.jobs import task_pipeline_args
    from streamplace.supervisor import JobSupervisor
    if not args.job_id:
        print("streamplace job: watch and replan need the job id", file=sys.stderr)
        return 2
    try:
        plan = parse_plan(args.plan) if args.plan else \
            {tm.id: 1 for tm in cluster.spec.taskmanagers}
        new_plan = parse_plan(args.new_plan) if args.action == "replan" else None
    except ValueError as exc:   # e.g. "bad plan entry 'garbage'"
        print(f"streamplace job: {exc}", file=sys.stderr)
        return 2

    def submit(new_plan, retired, restore):
        extra = _hook_settings(cfg, args, new_plan, retired)
        return cluster.submit_python_job(Path(pipeline.__file__),
                                         task_pipeline_args(cfg, **extra), restore_from=restore)

    capacities = {tm.id: tm.cpu_cores / tm.work_multiplier for tm in cluster.spec.taskmanagers}
    supervisor = JobSupervisor(cluster, submit, args.job_id, plan, capacities=capacities)

    def report(r):
        print(f"{r.reason}: job {r.old_job} -> {r.new_job} (plan {r.plan}, retired {r.retired}, "
              f"from {r.restored_from}); RUNNING {r.recovery_s:.1f} s after it was noticed",
              flush=True)

    if args.action == "replan":
        report(supervisor.apply_plan(new_plan))
        return 0
    print(f"watching job {args.job_id} (plan {plan}); Ctrl-C stops watching", flush=True)
    try:
        supervisor.watch(interval_s=2.0, on_report=report)
    except KeyboardInterrupt:
        pass
    return 0


# -- replay --------------------------------------------------------------------------------------
def cmd_replay(args) -> int:
    from tqdm import tqdm

    from streamplace.replay import replay_events, trace_events
    from workload.traces.datadir import describe_data_error
    cfg = _config(args)
    if not _data_dir_ok(args, "replay"):
        return 2
    try:
        events, where = trace_events(args.trace, args.data_dir, args.limit, args.rate,
                                     args.skip, args.prefix, args.seed,
                                     payloads=not args.light)
    except (ValueError, OSError) as exc:  # a malformed or unreadable trace file: say which
        print(f"streamplace replay: {describe_data_error(exc)}", file=sys.stderr)
        return 2
    print(where, flush=True)
    from streamplace.kafka_io import broker_problem
    problem = broker_problem(cfg)
    if problem:
        print(f"streamplace replay: {problem}", file=sys.stderr)
        return 1
    with tqdm(total=len(events), desc="replay -> kafka", unit="task", disable=None) as bar:
        report = replay_events(cfg, events, progress=bar.update)
    print(f"delivered {report['delivered']}/{report['sent']} TaskEvents to "
          f"{cfg.job.topic_tasks} in {report['wall_s']:.1f} s")
    for err in report["errors"][:5]:
        print(f"error: {err}", file=sys.stderr)
    return 0 if not report["errors"] else 1


# -- doctor --------------------------------------------------------------------------------------
def cmd_doctor(args) -> int:
    from streamplace.doctor import MISSING, format_checks, run_checks
    from streamplace.jars import flink_connector_jar
    cfg = _config(args)
    checks = run_checks(args.rest_url or cfg.flink.rest_url, flink_connector_jar(cfg))
    print(format_checks(checks))
    return 1 if any(c.status == MISSING for c in checks) else 0


# -- produce -------------------------------------------------------------------------------------
def cmd_produce(args) -> int:
    from tqdm import tqdm

    from streamplace.kafka_io import broker_problem, produce_task_events, synthetic_task_events
    cfg = _config(args)
    problem = broker_problem(cfg)
    if problem:
        print(f"streamplace produce: {problem}", file=sys.stderr)
        return 1
    with tqdm(total=args.count, desc="tasks -> kafka", unit="task", disable=None) as bar:
        report = produce_task_events(cfg, synthetic_task_events(args.count, seed=args.seed,
                                                                prefix=args.prefix,
                                                                payloads=args.payloads),
                                     progress=bar)
    print(f"delivered {report.delivered}/{report.sent} TaskEvents to {cfg.job.topic_tasks}")
    for err in report.errors[:5]:
        print(f"error: {err}", file=sys.stderr)
    return 0 if not report.errors else 1


# -- demo ----------------------------------------------------------------------------------------
def _data_dir_ok(args, command: str) -> bool:
    """A data folder the user named (``--data-dir``, else ``$STREAMPLACE_DATA_DIR``) must be a
    folder holding at least one data-set folder, else one line and False: a typo, an empty
    string or a folder one level too deep would quietly replay generated data. Nothing named:
    the search (``../shared/data``, ``./data``), then the generator, which says so."""
    from workload.traces.datadir import DataDirError, check_named_data_dir
    try:
        check_named_data_dir(getattr(args, "data_dir", None), option="--data-dir")
    except DataDirError as exc:
        print(f"streamplace {command}: {exc}", file=sys.stderr)
        return False
    return True


def cmd_demo(args) -> int:
    from streamplace.demo import run_demo
    if not _data_dir_ok(args, "demo"):
        return 2
    return run_demo(_config(args), tasks=args.tasks, quick=args.quick, keep=args.keep,
                    trace=args.trace, rate=args.rate, data_dir=args.data_dir)


# -- simulate ------------------------------------------------------------------------------------
def cmd_simulate(args) -> int:
    from interference.schedulers import make_node_scheduler
    from placement.policies import make_policy
    from simulator import GreedyOracle, Simulator
    from simulator.scenarios import (paper_cluster, paper_costs, paper_workload,
                                     saturated_workload)
    if args.model and args.policy != "ldwp":  # it would be ignored: say so rather than run
        print(f"streamplace simulate: --model is read by --policy ldwp only, not "
              f"--policy {args.policy}", file=sys.stderr)
        return 2
    if not _data_dir_ok(args, "simulate"):   # $STREAMPLACE_DATA_DIR: Gavel's co-location data
        return 2
    available = len(paper_cluster().nodes)
    if args.nodes > available:
        print(f"streamplace simulate: --nodes {args.nodes}: the paper cluster has {available} "
              "nodes", file=sys.stderr)
        return 2
    if args.rate is not None and args.tasks / args.rate > MAX_SIMULATED_MINUTES:
        print(f"streamplace simulate: {args.tasks} tasks at {args.rate:g}/min arrive over "
              f"{args.tasks / args.rate:,.0f} simulated minutes, over the "
              f"{MAX_SIMULATED_MINUTES:,} this command runs; raise --rate", file=sys.stderr)
        return 2
    costs, cluster = paper_costs(), paper_cluster(nodes=args.nodes)
    tasks = (saturated_workload(args.tasks, seed=args.seed) if args.rate is None
             else paper_workload(args.rate, args.tasks, seed=args.seed))
    try:
        if args.policy == "oracle":
            policy = GreedyOracle()
        elif args.policy == "ldwp":  # the shipped trained model, or --model
            from placement.ldwp.agent import LDWPPolicy
            from placement.ldwp.shipped import shipped_model
            policy = LDWPPolicy.from_file(args.model or shipped_model(), cluster, costs)
        else:
            policy = make_policy(args.policy, cluster, costs, seed=args.seed)
        scheduler = make_node_scheduler(args.scheduler, costs, seed=args.seed)
    except (ValueError, OSError) as exc:  # an unknown name or a bad model file: say so
        print(f"streamplace: {exc}", file=sys.stderr)
        return 2
    from simulator import SimulationConfig
    from workload.traces.datadir import DataNotFound, TraceFormatError, describe_data_error
    config = SimulationConfig(max_dispatched_per_node=args.manager_queue)
    try:   # the run reads Gavel's co-location table from the data folder
        result = Simulator(costs, config).run(policy, scheduler, cluster, tasks, seed=args.seed)
    except (TraceFormatError, DataNotFound, OSError) as exc:
        print(f"streamplace simulate: {describe_data_error(exc)}", file=sys.stderr)
        return 2
    metrics = result.metrics.as_dict()
    if args.json:   # strict JSON: a metric with no value (no task completed) is null
        print(json.dumps(_finite_or_null(metrics), indent=2, allow_nan=False))
    else:
        for key in ("policy", "node_scheduler", "tasks", "completed", "throughput_per_min",
                    "upper_bound_per_min", "latency_p50_s", "latency_p99_s", "gpu_utilisation",
                    "cpu_utilisation", "useful_gpu_work_per_gpu_second",
                    "load_balancing_degree", "oom_failures"):
            value = metrics[key]
            print(f"{key:32s} {value:.3f}" if isinstance(value, float) else
                  f"{key:32s} {value}")
        for task_id, decision in result.decisions[:args.show_decisions]:
            print(f"  {task_id}: {decision.node} ({decision.reason})")
    return 0


def _finite_or_null(value):
    """``value`` with every non-finite float (recursively) as None: what JSON can carry."""
    if isinstance(value, float):
        from workload.limits import finite_real
        return finite_real(value)
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


# -- serve ---------------------------------------------------------------------------------------
def service_settings(cfg, host=None, port=None, token=None):
    """The service's settings: the ``service`` section, with what it leaves unset taken from the
    rest of the configuration (broker, feedback topic, Flink REST, cluster spec, home/models),
    then the command-line flags, then ``$STREAMPLACE_SERVICE_TOKEN`` for a token (a token on
    the command line is visible to every user in ``ps``).

    Where the JobManager is not on loopback (``isolation: host`` moved it to the head address,
    or a real multi-host cluster set ``flink.host``), the TaskManagers' hooks cannot reach a
    loopback service: unless a host is set, the service binds the JobManager's address, with
    the configured token or else one from ``<home>/service.token`` (made if missing,
    :mod:`streamplace.service_token`), which ``job submit`` hands to the hooks."""
    import os

    from pydantic import ValidationError

    from placement.service.settings import is_loopback
    from streamplace.config import ConfigError, ServiceSettings
    from streamplace.service_token import TokenFileError, ensure_token
    given = cfg.service.model_fields_set
    data = cfg.service.model_dump()
    inherited = {"bootstrap_servers": cfg.kafka.bootstrap_servers,
                 "feedback_topic": cfg.job.topic_feedback, "flink_rest_url": cfg.flink.rest_url,
                 "cluster_spec": cfg.flink.cluster_spec, "model_dir": cfg.home / "models"}
    data.update({k: v for k, v in inherited.items() if k not in given})
    flags = {"host": host, "port": port,
             "token": token or (None if "token" in given
                                else os.environ.get("STREAMPLACE_SERVICE_TOKEN"))}
    data.update({k: v for k, v in flags.items() if v is not None})
    if host is None and "host" not in given and not is_loopback(cfg.flink.host):
        data["host"] = cfg.flink.host
        if not data.get("token"):
            try:
                data["token"] = ensure_token(cfg.home)
            except (TokenFileError, OSError) as exc:
                raise ConfigError(f"the service binds {cfg.flink.host} and needs a token: {exc}"
                                  ) from None
    try:
        settings = ServiceSettings.model_validate(data)
        settings.check_security()
    except ValidationError as exc:
        raise ConfigError(f"invalid service settings:\n{exc}") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return settings


def cmd_serve(args) -> int:
    import logging

    cfg = _config(args)
    settings = service_settings(cfg, args.host, args.port, args.token)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    from placement.service.app import PlacementService
    try:
        # the spec from its setting; the default one gives way to the cluster's own
        # TaskManagers when Flink lists none of its nodes (PlacementService)
        service = PlacementService(settings)
    except ValueError as exc:  # a bad spec, initial model or learning setting: say which
        print(f"streamplace serve: {exc}", file=sys.stderr)
        return 2
    print(f"placement service on {settings.url} (model dir {settings.resolved_model_dir()}, "
          f"feedback {settings.feedback_topic} at {settings.bootstrap_servers}, "
          f"token {'required' if settings.token else 'off (loopback only)'}); Ctrl-C stops it",
          flush=True)
    service.serve_forever()
    print("placement service: stopped (consumer closed)")
    return 0


# -- config --------------------------------------------------------------------------------------
def cmd_config(args) -> int:
    from streamplace.config import config_reference
    if args.reference:
        print(config_reference())
        return 0
    print(_config(args).model_dump_json(indent=2))
    return 0


# -- info ----------------------------------------------------------------------------------------
def cmd_info(args) -> int:
    from streamplace import __version__
    from streamplace.resources import cluster_spec_dir, kafka_assets
    cfg = _config(args)
    info = {"version": __version__, "python": sys.executable, "home": str(cfg.home),
            "kafka_assets": str(kafka_assets()), "cluster_specs": str(cluster_spec_dir()),
            "kafka_bootstrap": cfg.kafka.bootstrap_servers, "flink_rest": cfg.flink.rest_url}
    try:
        from streamplace.flink_cluster import flink_home
        info["flink_home"] = str(flink_home())
    except Exception as exc:  # noqa: BLE001 - info must report, not fail
        info["flink_home"] = f"unavailable: {exc}"
    print(json.dumps(info, indent=2) if args.json else
          "\n".join(f"{k:16s} {v}" for k, v in info.items()))
    return 0


def _int_in(low: int, high: int):
    """An argparse type: a whole number in [low, high], else a one-line usage error."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in [{low}, {high}]")
        return value
    return whole


def _positive_rate(high: float):
    """An argparse type: a finite number in (0, high], else a one-line usage error."""
    def rate(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and 0.0 < value <= high):
            raise argparse.ArgumentTypeError(f"{text} is not a number in (0, {high:g}]")
        return value
    return rate


#: most simulated minutes of arrivals ``simulate`` runs (tasks / rate): the run's memory grows
#: with simulated time (100,000 minutes: 10.9 GB and over 5 minutes; a rate of 1e-6 never ended)
MAX_SIMULATED_MINUTES = 3_000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamplace",
        description="Learned, interference-aware placement for PyFlink + Kafka streaming jobs.")
    parser.add_argument("--config", help="YAML configuration file (default: $STREAMPLACE_CONFIG)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one setting, e.g. --set kafka.port=19092 (repeatable)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("kafka", help="the local Apache Kafka broker (KRaft)")
    p.add_argument("action", choices=["start", "stop", "status", "topics"])
    p.add_argument("--no-topics", action="store_true", help="start without creating topics")
    p.set_defaults(func=cmd_kafka)

    p = sub.add_parser("cluster", help="the local Flink cluster (JobManager + TaskManagers)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--spec", help="cluster spec name or YAML path (default: config)")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("up", help="start the broker (with topics) and the cluster")
    p.add_argument("--spec", help="cluster spec name or YAML path")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("down", help="stop the cluster and the broker")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("jars", help="fetch the Kafka broker and Flink connector jars (Maven)")
    p.add_argument("--force", action="store_true", help="download again even if present")
    p.add_argument("--verbose", action="store_true", help="show Maven's output")
    p.set_defaults(func=cmd_jars)

    p = sub.add_parser("job", help="submit, list, cancel, watch or re-plan the task pipeline; "
                                   "run your own PyFlink job on the cluster")
    p.add_argument("action", choices=["submit", "run", "list", "cancel", "watch", "replan"])
    p.add_argument("job_id", nargs="?", help="the job id (cancel, watch, replan), or the "
                                             "job's .py file (run; its own arguments after "
                                             "--)")
    p.add_argument("--pin", help="pin the executor to this TaskManager id")
    p.add_argument("--parallelism", type=_int_in(1, 1024), default=1, help="executor instances")
    p.add_argument("--executor", choices=["checksum", "iawp"], default="checksum",
                   help="executor without the hook")
    p.add_argument("--hook", action="store_true",
                   help="route with the streamplace hook (router + pinned IAWP executors)")
    p.add_argument("--policy", default="ldwp", help="hook: 'ldwp' or a placement.policies name")
    p.add_argument("--service-url", default="", help="hook: the placement service "
                                                     "(e.g. http://127.0.0.1:8471)")
    p.add_argument("--plan", default="", help="hook: executor instances, e.g. tm_a=2,tm_b=1")
    p.add_argument("--new-plan", default="", help="replan: the plan to apply")
    p.add_argument("--scheduler", default="iawp", help="hook: the executors' node scheduler")
    p.set_defaults(func=cmd_job)

    p = sub.add_parser("replay", help="replay a request trace into the tasks topic, "
                                      "time-compressed, each task with its real clip",
                       description="Replay a request trace into the tasks topic, "
                                   "time-compressed. Each TaskEvent carries its real clip in "
                                   "'payload' (grey JPEG frames cut from real photographs, "
                                   "9-70 KB a record), which the executors decode and run the "
                                   "apps on; --light sends records without clips (about 100 "
                                   "bytes: the executors make synthetic frames).")
    p.add_argument("--trace", default="alibaba-genai", choices=["alibaba-genai", "synthetic"])
    p.add_argument("--data-dir", help="folder with the traces (default: $STREAMPLACE_DATA_DIR, "
                                      "../shared/data, ./data)")
    p.add_argument("--limit", type=_int_in(1, 10**8), default=1200, help="requests to replay")
    p.add_argument("--skip", type=_int_in(0, 10**9), default=0,
                   help="requests to skip at the start")
    p.add_argument("--rate", type=_positive_rate(1e6), default=40.0, help="mean tasks per second")
    p.add_argument("--prefix", default="replay", help="task id prefix")
    p.add_argument("--seed", type=int, default=0, help="generator seed (no data folder)")
    p.add_argument("--light", action="store_true",
                   help="no payloads: light records without the clips (the executors make "
                        "synthetic frames of input_size pixels)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("doctor", help="check a Flink cluster for what the hook needs")
    p.add_argument("--rest-url", help="JobManager REST API (default: the configured cluster)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("produce", help="send synthetic TaskEvents to the tasks topic",
                       description="Send synthetic TaskEvents (the three apps, lognormal input "
                                   "sizes) to the tasks topic. Light records by default (the "
                                   "executors make synthetic frames); --payloads attaches each "
                                   "task's real clip.")
    p.add_argument("--count", type=_int_in(1, 10**8), default=1000, help="TaskEvents to send")
    p.add_argument("--seed", type=_int_in(0, 2**32 - 1), default=0,
                   help="seed of the synthetic tasks")
    p.add_argument("--prefix", default="task", help="task id prefix")
    p.add_argument("--payloads", action="store_true",
                   help="attach each task's real clip in 'payload' (grey JPEG frames cut from "
                        "real photographs, seeded by the task id; 5-240 KB a record, about "
                        "15 KB at the median size; needs torch in the producer)")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("demo", help="replay a trace through the job with Flink's default "
                                    "placement and with the hook, compare, stop everything")
    p.add_argument("--tasks", type=_int_in(1, 10**7), default=None, help="tasks to replay (default 1200, "
                                                           "240 with --quick)")
    p.add_argument("--trace", default="alibaba-genai", choices=["alibaba-genai", "synthetic"])
    p.add_argument("--rate", type=_positive_rate(1e6), default=None,
                   help="mean tasks per second (45)")
    p.add_argument("--data-dir", help="folder with the traces (default: $STREAMPLACE_DATA_DIR, "
                                      "../shared/data, ./data)")
    p.add_argument("--quick", action="store_true", help="a short run (used by make test)")
    p.add_argument("--keep", action="store_true", help="leave the broker and cluster running")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("simulate", help="run one (cluster policy, node scheduler) pair on the "
                                        "simulated paper setting")
    p.add_argument("--policy", default="mct", help="a placement.policies name, 'oracle', or "
                                                    "'ldwp' (the shipped trained model)")
    p.add_argument("--model", help="with --policy ldwp: this model file instead of the shipped one")
    p.add_argument("--scheduler", default="heft", help="an interference.schedulers name")
    p.add_argument("--rate", type=_positive_rate(1e6), default=50.0,
                   help="arrivals per minute (omit with --saturated)")
    p.add_argument("--saturated", dest="rate", action="store_const", const=None,
                   help="arrivals faster than any policy can serve")
    p.add_argument("--tasks", type=_int_in(1, 1_000_000), default=300, help="tasks to run")
    p.add_argument("--nodes", type=_int_in(1, 10**6), default=11,
                   help="the first N of the paper cluster's 11 nodes")
    p.add_argument("--seed", type=_int_in(0, 2**32 - 1), default=1,
                   help="seed of the tasks, the policy and the run")
    p.add_argument("--manager-queue", type=_positive_rate(1e6), default=None, metavar="W",
                   help="tasks wait at the cluster manager and the longest-waiting one is "
                        "decided while fewer than W per node are unfinished (default: each "
                        "task is decided on arrival; benchmarks/manager_queue.py)")
    p.add_argument("--show-decisions", type=_int_in(0, 10**6), default=3, metavar="N",
                   help="print the first N decisions with their reasons")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("serve", help="the placement service: learns from feedback, serves "
                                     "model versions, decisions and the slot plan over HTTP")
    p.add_argument("--host", help="bind address (default 127.0.0.1; others need a token)")
    p.add_argument("--port", type=int, help="HTTP port (default 8471)")
    p.add_argument("--token", help="bearer token (prefer $STREAMPLACE_SERVICE_TOKEN or the "
                                   "config file: command lines are visible in ps)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("config", help="print the effective configuration, or --reference: "
                                      "every setting with its default as a markdown table")
    p.add_argument("--reference", action="store_true")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("info", help="versions, paths and endpoints")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)
    return parser


def _data_error_line(exc: BaseException) -> str | None:
    """One line for an error about a data file or folder, None for any other error. The trace
    readers are imported here, not before every command: they need numpy, which the light
    install (``pip install streamplace``, no extras) does not have."""
    try:
        from workload.traces.datadir import (DataDirError, DataNotFound, TraceFormatError,
                                             describe_data_error)
    except ImportError:
        return None
    if isinstance(exc, (TraceFormatError, DataNotFound, DataDirError)):
        return describe_data_error(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `job run my_job.py -- its arguments`: what follows the first -- is the job's, unparsed
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, script_args = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    args.script_args = script_args
    if script_args and (args.command, getattr(args, "action", None)) != ("job", "run"):
        print(f"streamplace: arguments after -- are a job's own, for `streamplace job run "
              f"<job>.py -- ...` only: {' '.join(script_args)[:200]}", file=sys.stderr)
        return 2
    from streamplace.config import ConfigError
    from streamplace.processes import LaunchError
    from workload.cluster_spec import SpecError
    try:
        return int(args.func(args) or 0)
    except (ConfigError, LaunchError, SpecError) as exc:
        print(f"streamplace: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader left (``| head``): stop quietly; stdout goes to /dev/null so that the
        # interpreter's final flush does not fail a second time (Python's documented recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, OSError) as exc:
        line = _data_error_line(exc)
        if line is None:
            raise
        print(f"streamplace: {line}", file=sys.stderr)   # a data file or folder: say which
        return 2
    except KeyboardInterrupt:
        print("streamplace: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
