"""The examples benchmark's pure parts: the goals read from a summary, and how the hooked jobs
reach the placement service on emulated hosts (no cluster needed)."""

import json
from types import SimpleNamespace

import pytest

from benchmarks.flink_e2e import router_gauges
from benchmarks.flink_e2e_examples import (VARIANTS, checkpoint_summary, decision_phases,
                                           flink_conf_entries, operator_hosts, service_access,
                                           slowest_checkpoint, start_engines, verdict)
from placement.service.flink_rest import FlinkRestClient, FlinkUnreachable


def _row(label, mean):
    return {"variant": label, "records_per_s": None if mean is None else {"mean": mean}}


@pytest.mark.parametrize("means, expected", [
    # LDWP, default distribution, MCT, batching off, plain -> the four ratios
    ((30.0, 20.0, 25.0, 15.0, 10.0), (1.5, 3.0, 1.2, 2.0)),
    ((10.0, 20.0, 20.0, 20.0, 20.0), (0.5, 0.5, 0.5, 0.5)),
    # a variant that was not run (--only) or has no rate gives no ratio, not a crash
    ((10.0, None, 20.0, None, 5.0), (None, 2.0, 0.5, None)),
    ((None, 20.0, 20.0, 20.0, 20.0), (None, None, None, None)),
])
def test_verdict_ratios(means, expected):
    ldwp, default, mct, off, plain = means
    summary = [_row(VARIANTS[0][0], default), _row("MCT at measured speeds", mct),
               _row("LDWP + IAWP", ldwp), _row("LDWP + IAWP, batching off", off),
               _row("plain job (Flink places its map; see docstring)", plain)]
    got = verdict(summary)
    assert (got["ldwp_over_flink_default_distribution"], got["ldwp_over_plain_job"],
            got["ldwp_over_mct"], got["batching_on_over_off"]) == pytest.approx(expected)


def _cluster(emulated, head="10.213.0.1"):
    return SimpleNamespace(isolation=SimpleNamespace(emulated=emulated, head_address=head))


def test_service_stays_on_loopback_without_emulated_hosts():
    assert service_access(_cluster(False), False) == ({}, {})
    # a named spec in the cpuset fallback: the jobs still read their nodes from it
    assert service_access(_cluster(False), "hosts") == ({"CLUSTER_SPEC": "hosts"}, {})


def test_service_binds_head_address_with_a_token_on_emulated_hosts():
    env, binding = service_access(_cluster(True), "hosts")
    assert binding["host"] == "10.213.0.1"
    assert len(binding["token"]) == 32 and env["SERVICE_TOKEN"] == binding["token"]
    assert env["CLUSTER_SPEC"] == "hosts"
    # a fresh secret per benchmark, never a fixed one
    assert service_access(_cluster(True), "hosts")[1]["token"] != binding["token"]


@pytest.mark.parametrize("entries, expected", [
    ([], {}),
    (["a.b=1", " c = x=y "], {"a.b": "1", "c": "x=y"}),   # the value keeps a later "="
    (["a.b="], {"a.b": ""}),
])
def test_flink_conf_entries(entries, expected):
    assert flink_conf_entries(entries) == expected


@pytest.mark.parametrize("bad", ["no-equals", "=1", "  =1"])
def test_flink_conf_entries_refuse_entries_without_a_key(bad):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        flink_conf_entries(["ok=1", bad])


def _serve(monkeypatch, answer):
    """Every FlinkRestClient GET answered by ``answer(base_url + path)``."""
    monkeypatch.setattr(FlinkRestClient, "get",
                        lambda self, path, timeout_s=None: answer(self.base_url + path))


def test_slowest_checkpoint_names_where_the_barrier_waited(monkeypatch):
    """The slowest completed checkpoint is picked (not a slower failed one), and each
    operator's slowest subtask numbers are reported under the operator's name."""
    history = [{"id": 3, "status": "COMPLETED", "end_to_end_duration": 900},
               {"id": 4, "status": "FAILED", "end_to_end_duration": 60000},
               {"id": 5, "status": "COMPLETED", "end_to_end_duration": 15000}]
    subtasks = {"v1": {"end_to_end_duration": {"max": 30}, "start_delay": {"max": 20},
                       "alignment": {"duration": {"max": 0}},
                       "checkpoint_duration": {"sync": {"max": 1}, "async": {"max": 2}}},
                "v2": {"end_to_end_duration": {"max": 15000}, "start_delay": {"max": 9000}}}
    asked = []

    def get(url):
        asked.append(url)
        if url.endswith("/jobs/j"):
            return {"vertices": [{"id": "v1", "name": "router"},
                                 {"id": "v2", "name": "executor-tm_b"}]}
        return {"summary": subtasks[url.rsplit("/", 1)[1]]}

    _serve(monkeypatch, get)
    got = slowest_checkpoint("http://rest", "j", history)
    assert got["id"] == 5 and got["end_to_end_ms"] == 15000
    assert all("/checkpoints/details/5/subtasks/" in url for url in asked[1:])
    assert got["operators"]["router"] == {"end_to_end_ms": 30, "start_delay_ms": 20,
                                          "alignment_ms": 0, "sync_ms": 1, "async_ms": 2}
    assert got["operators"]["executor-tm_b"]["start_delay_ms"] == 9000
    assert got["operators"]["executor-tm_b"]["sync_ms"] is None   # not reported: None


def test_slowest_checkpoint_without_a_completed_one_or_with_rest_down(monkeypatch):
    assert slowest_checkpoint("http://rest", "j", [{"id": 1, "status": "FAILED"}]) == {}

    def down(url):
        raise FlinkUnreachable(f"Flink REST API at {url} is unreachable (refused)", "refused")

    _serve(monkeypatch, down)
    got = slowest_checkpoint("http://rest", "j", [{"id": 2, "status": "COMPLETED",
                                                   "end_to_end_duration": 5}])
    assert got["id"] == 2 and got["operators"] == {} and "refused" in got["error"]


def test_conf_suffix_depends_only_on_the_entries():
    from benchmarks.flink_e2e_examples import conf_suffix
    assert conf_suffix({}) == ""
    one = conf_suffix({"a": "1", "b": "2"})
    assert one == conf_suffix({"b": "2", "a": "1"}) and one.startswith("_conf-")
    assert len(one) == len("_conf-") + 8
    assert one != conf_suffix({"a": "1", "b": "3"})


def test_operator_hosts_lists_each_operators_taskmanagers(monkeypatch):
    answers = {
        "http://rest/jobs/j": {"vertices": [{"id": "v1", "name": "streamplace-router"},
                                            {"id": "v2", "name": "executor"}]},
        "http://rest/jobs/j/vertices/v1/taskmanagers": {"taskmanagers": [
            {"taskmanager-id": "10.213.0.3:4000-aa"}]},
        "http://rest/jobs/j/vertices/v2/taskmanagers": {"taskmanagers": [
            {"taskmanager-id": "b"}, {"endpoint": "a:1"}, {"taskmanager-id": "b"}]}}
    _serve(monkeypatch, answers.__getitem__)
    assert operator_hosts("http://rest", "j") == {"streamplace-router": ["10.213.0.3:4000-aa"],
                                                  "executor": ["a:1", "b"]}
    _serve(monkeypatch, lambda url: {})
    assert "KeyError" in operator_hosts("http://rest", "j")["error"]


class _Engine:
    def __init__(self, log, name, fails=False):
        self.log, self.name, self.fails = log, name, fails

    def start(self):
        self.log.append(f"{self.name} start")
        if self.fails:
            raise RuntimeError(f"{self.name} did not come up")

    def stop(self):
        self.log.append(f"{self.name} stop")


def test_a_cluster_that_fails_to_start_is_stopped_with_the_broker():
    log = []
    with pytest.raises(RuntimeError, match="cluster did not come up"):
        start_engines(_Engine(log, "broker"), _Engine(log, "cluster", fails=True))
    assert log == ["broker stop", "cluster stop", "broker start", "cluster start",
                   "cluster stop", "broker stop"]


def test_engines_that_start_are_left_running():
    log = []
    start_engines(_Engine(log, "broker"), _Engine(log, "cluster"))
    assert log == ["broker stop", "cluster stop", "broker start", "cluster start"]


def test_decision_phases_come_from_the_routers_phase_gauges_only():
    gauges = {"streamplace_decision_p99_us": 900.0, "streamplace_decision_policy_p99_us": 800.0,
              "streamplace_decision_cpu_p99_us": 40.0, "streamplace_decision_compiled": 1.0,
              "streamplace_routed_tm_a": 5.0}
    assert decision_phases(gauges) == {"cpu": 40.0, "policy": 800.0}


def test_a_second_benchmark_on_the_same_home_is_refused_with_the_holder(tmp_path):
    import subprocess
    import sys
    from benchmarks._common import exclusive_home
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from benchmarks._common import "
        "exclusive_home\nwith exclusive_home(Path(sys.argv[1])):\n    print('held', flush=True)"
        "\n    time.sleep(30)"), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match=f"in use by a running benchmark \\(pid {holder.pid}"):
            with exclusive_home(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive_home(tmp_path):     # a holder that died leaves no lock behind
        assert (tmp_path / "benchmark.lock").read_text().startswith("pid ")


def test_the_frozen_ablation_takes_another_model_file_and_says_so(tmp_path):
    from benchmarks.flink_e2e_examples import EXTRA_VARIANTS, frozen_variant
    assert frozen_variant(EXTRA_VARIANTS[0], "") == EXTRA_VARIANTS[0]
    model = tmp_path / "v000027.spmodel"
    model.write_bytes(b"x")
    label, env = frozen_variant(EXTRA_VARIANTS[0], str(model))
    assert label == "LDWP frozen (v000027.spmodel, no service)"
    assert env["INITIAL_MODEL"] == str(model) and env["SERVICE_URL"] == ""
    with pytest.raises(SystemExit, match="no such file"):
        frozen_variant(EXTRA_VARIANTS[0], str(tmp_path / "missing.spmodel"))


def test_the_prior_only_service_variant_keeps_its_service_and_has_no_learning(tmp_path):
    """The prior-only ablation is not a frozen variant (a --frozen-model file leaves it as it
    is) and names the placeholder its own service's URL replaces; that service's settings
    are valid and never publish or train a learned version."""
    from benchmarks.flink_e2e_examples import (EXTRA_VARIANTS, NEVER, PRIOR_SERVICE_LABEL,
                                               PRIOR_SERVICE_URL, frozen_variant)
    from placement.service import ServiceSettings
    from placement.service.learner import learning_settings
    variant = next(v for v in EXTRA_VARIANTS if v[0].startswith(PRIOR_SERVICE_LABEL))
    model = tmp_path / "prior.spm"
    model.write_bytes(b"x")
    assert frozen_variant(variant, str(model)) == variant
    assert variant[1] == {"POLICY": "ldwp", "SERVICE_URL": PRIOR_SERVICE_URL}
    settings = ServiceSettings(port=0, min_records_first_version=NEVER,
                               learning={"learning_starts": NEVER})
    assert settings.publish_prior
    assert learning_settings(settings.learning).learning_starts == NEVER


def test_the_prior_file_decides_as_mct_at_the_same_learned_costs(tmp_path):
    """--frozen-model prior: the service's starting weights decide every task where MCT's
    completion estimate does, at the same costs and node states."""
    from benchmarks.flink_e2e import load_spec
    from benchmarks.flink_e2e_examples import prior_model_file
    from placement.ldwp.inference import NumpyLDWPPolicy
    from placement.measured_costs import MeasuredCosts
    from placement.policies import make_policy
    from placement.service.learner import to_cluster_spec
    from workload.estimates import CostModel
    from workload.model import NodeState, Observation, Task
    path = prior_model_file("hosts", tmp_path)
    assert path.name == "ldwp_prior_hosts.spm"
    cluster = to_cluster_spec(load_spec("hosts"), "t4")
    costs = MeasuredCosts(cluster, prior=CostModel())
    for node, seconds in (("tm_a", 0.05), ("tm_b", 0.4), ("tm_c", 0.2)):
        for i in range(30):
            costs.observe(node, "review", 800, seconds)
    prior = NumpyLDWPPolicy.from_file(path, cluster, costs)
    mct = make_policy("mct", cluster, costs=costs)
    agree = 0
    for k, backlogs in enumerate(((0, 0, 0), (2.0, 0, 0), (6.0, 0.5, 1.0), (0, 3.0, 0.2))):
        states = tuple(NodeState(n, queue_depth=int(b * 4), backlog_s=b)
                       for n, b in zip(("tm_a", "tm_b", "tm_c"), backlogs))
        observation = Observation(Task(f"t{k}", "review", 800), states, 0.0)
        agree += prior.decide(observation).node == mct.decide(observation).node
    assert agree == 4


def _json_routes(server, routes: dict) -> None:
    """GET ``path`` answers ``body`` as JSON, for each ``path: body``."""
    server.routes.update({("GET", path): (200, json.dumps(body).encode())
                          for path, body in routes.items()})


def test_router_gauges_read_over_the_one_rest_client(jobmanager):
    """Over real HTTP: the router vertex is found by name, its streamplace_ gauges are asked
    for in one request (ids comma-joined in the query), and a value that is not a number is
    left out instead of failing the run's summary."""
    server, url = jobmanager, jobmanager.url
    metrics = "/jobs/j/vertices/v2/metrics"
    ids = ["0.streamplace-router.streamplace_decision_p99_us",
           "0.streamplace-router.streamplace_decision_compiled",
           "0.streamplace-router.streamplace_policy"]
    _json_routes(server, {
        "/jobs/j": {"vertices": [{"id": "v1", "name": "source"},
                                 {"id": "v2", "name": "streamplace-router -> map"}]},
        metrics: [{"id": i} for i in ids] + [{"id": "0.numRecordsIn"}],
        f"{metrics}?get={','.join(ids)}": [{"id": ids[0], "value": "41.5"},
                                           {"id": ids[1], "value": "1"},
                                           {"id": ids[2], "value": "ldwp"}]})
    assert router_gauges(url, "j", wait_s=0.0) == {"streamplace_decision_p99_us": 41.5,
                                                   "streamplace_decision_compiled": 1.0}
    _json_routes(server, {"/jobs/k": {"vertices": [{"id": "v1", "name": "source"}]}})
    assert router_gauges(url, "k", wait_s=0.0) == {}     # no router vertex: no gauges


def test_checkpoint_summary_over_http_and_with_the_jobmanager_gone(jobmanager):
    server, url = jobmanager, jobmanager.url
    _json_routes(server, {
        "/jobs/j/checkpoints": {"counts": {"completed": 3, "failed": 1},
                                "summary": {"end_to_end_duration": {"p50": 900, "p95": 1500,
                                                                     "max": 2000}},
                                "history": [{"id": 7, "status": "COMPLETED",
                                             "end_to_end_duration": 2000}]},
        "/jobs/j": {"vertices": [{"id": "v1", "name": "router"}]},
        "/jobs/j/checkpoints/details/7/subtasks/v1": {"summary": {
            "end_to_end_duration": {"max": 2000}, "start_delay": {"max": 1200}}}})
    got = checkpoint_summary(url, "j")
    assert (got["completed"], got["failed"], got["p50"], got["p95"], got["max"]) == \
        (3, 1, 900, 1500, 2000)
    assert got["slowest"]["id"] == 7
    assert got["slowest"]["operators"]["router"]["start_delay_ms"] == 1200
    assert checkpoint_summary(url, "unknown") == {}        # 404: no numbers, not a failed run
    server.shutdown()
    server.server_close()                                  # the fixture's second close: a no-op
    assert checkpoint_summary(url, "j") == {}              # JobManager gone: the same


def test_the_overheads_cost_without_the_jit_compares_cpu_a_record_once_compiled():
    from benchmarks.flink_e2e_examples import cpu_costs_without_jit

    def row(variant, python, jvm, jit):
        return {"variant": variant, "python_us_per_record": {"mean": python},
                "jvm_us_per_record": {"mean": jvm}, "jit_us_per_record": {"mean": jit}}

    # plain: 12 + 20 - 8 = 24 µs; hook: 20 + 30 - 14 = 36 µs -> a third more CPU, 1 - 24/36
    steady, costs = cpu_costs_without_jit([row("plain", 12, 20, 8), row("hook", 20, 30, 14),
                                           row("same", 10, 14, 0)])
    assert steady == {"plain": 24, "hook": 36, "same": 24}
    assert costs["hook"] == pytest.approx(1 / 3) and costs["same"] == pytest.approx(0.0)
    assert "plain" not in costs


def test_the_overhead_plot_draws_both_jobs(tmp_path, monkeypatch):
    from benchmarks.flink_e2e_examples import plot_overhead

    def row(variant, rate, python, on_records, jvm, jit):
        return {"variant": variant, "records_per_s": {"mean": rate, "ci95": [rate - 5, rate + 5]},
                "python_us_per_record": {"mean": python},
                "record_thread_us_per_record": {"mean": on_records},
                "jvm_us_per_record": {"mean": jvm}, "jit_us_per_record": {"mean": jit}}

    path = tmp_path / "overhead.png"
    # thread mode has no Python workers: its Python parts are 0
    plot_overhead([row("plain", 100.0, 12.0, 11.0, 20.0, 8.0), row("hook", 80.0, 0.0, 0.0, 25.0,
                                                                   6.0)], "title", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    # with the written rates (before the commit) beside the committed ones: four rate bars
    import matplotlib.pyplot as plt
    drawn = []
    real_subplots = plt.subplots

    def spying_subplots(*args, **kwargs):
        fig, axes = real_subplots(*args, **kwargs)
        drawn.append(axes[0])
        return fig, axes
    rows = [dict(row("plain", 100.0, 12.0, 11.0, 20.0, 8.0),
                 written_records_per_s={"mean": 150.0, "ci95": [140.0, 160.0]}),
            dict(row("hook", 80.0, 14.0, 12.0, 25.0, 6.0),
                 written_records_per_s={"mean": 140.0, "ci95": [130.0, 150.0]})]
    monkeypatch.setattr(plt, "subplots", spying_subplots)
    plot_overhead(rows, "title", tmp_path / "written.png")
    widths = sorted(bar.get_width() for bar in drawn[0].patches)
    assert widths == [80.0, 100.0, 140.0, 150.0]


def test_the_summary_gives_each_variants_machine_busy_share_where_runs_measured_it():
    from benchmarks.flink_e2e_examples import summarise
    rows = [{"variant": "a", "records_per_s": 10.0, "host_load": {"machine_busy_share": 0.9}},
            {"variant": "a", "records_per_s": 12.0, "host_load": {"machine_busy_share": 0.7}},
            {"variant": "b", "records_per_s": 5.0, "host_load": {}},       # not emulated hosts
            {"variant": "b", "records_per_s": 6.0}]
    got = {s["variant"]: s for s in summarise(rows, [("a", {}), ("b", {})])}
    assert got["a"]["machine_busy_share"]["mean"] == pytest.approx(0.8)
    assert got["a"]["machine_busy_share"]["runs"] == [0.9, 0.7]
    assert got["b"]["machine_busy_share"] is None
    assert got["b"]["records_per_s"]["mean"] == pytest.approx(5.5)


def test_the_vertex_time_sampler_is_none_when_off_or_the_vertices_cannot_be_listed(monkeypatch):
    """A diagnosis never fails a run: no REST, no sampler (the run records an empty window)."""
    from types import SimpleNamespace

    import benchmarks.flink_e2e_examples as bx

    def unreachable(rest_url, job_id):
        raise ConnectionError("no JobManager")
    monkeypatch.setattr(bx, "vertex_names", unreachable)
    with bx.vertex_time(SimpleNamespace(rest_url="http://127.0.0.1:9"), "job") as times:
        assert times is None
    monkeypatch.setattr(bx, "vertex_names", lambda rest_url, job_id: {"v": "router"})
    with bx.vertex_time(SimpleNamespace(rest_url="http://127.0.0.1:9"), "job",
                        interval_s=0) as times:   # off (the default of --vertex-time)
        assert times is None
    with bx.vertex_time(SimpleNamespace(rest_url="http://127.0.0.1:9"), "job",
                        interval_s=0.01) as times:
        assert times is not None and times.vertices == {"v": "router"}
    assert not times._thread.is_alive()


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_or_nan_vertex_time_interval_is_refused_before_anything_starts(value, capsys):
    from benchmarks.flink_e2e_examples import _main
    with pytest.raises(SystemExit) as exit_:
        _main(["--vertex-time", value])
    assert exit_.value.code == 2 and "--vertex-time must be" in capsys.readouterr().err


def test_the_services_health_is_kept_and_a_silent_service_is_none():
    """What a benchmark service learned, held and tried goes into the result (its /health);
    one that does not answer (stopped, or not JSON) leaves None, not a failed benchmark."""
    import http.server
    import threading

    from benchmarks.flink_e2e_examples import service_health

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):   # noqa: N802 - the stdlib's name
            body = json.dumps({"model_version": 4, "learner": {"versions_held": 2}}).encode() \
                if self.path == "/health" else b"not json"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert service_health(url) == {"model_version": 4, "learner": {"versions_held": 2}}
        assert service_health(url + "/elsewhere") is None          # answers, but not JSON
    finally:
        server.shutdown()
        server.server_close()
    assert service_health(url) is None                             # gone


def _run(variant: str, round_: int, rate):
    return {"variant": variant, "round": round_, "records_per_s": rate}


def test_paired_ratios_compare_variants_within_each_round():
    """Per round the variant over its baseline; the geometric mean and interval of those, not
    a ratio of means: here the machine doubles its speed in round 2 for everyone."""
    from benchmarks.flink_e2e_examples import PRIOR_SERVICE_LABEL, paired_ratios
    default, mct = VARIANTS[0][0], "MCT at measured speeds"
    rows = [_run(default, 0, 100.0), _run(mct, 0, 110.0), _run("LDWP + IAWP", 0, 121.0),
            _run(default, 1, 200.0), _run(mct, 1, 220.0), _run("LDWP + IAWP", 1, 242.0),
            _run(default, 2, 150.0), _run(mct, 2, 165.0), _run("LDWP + IAWP", 2, 181.5),
            # ablations with the same prefix are not LDWP + IAWP
            _run("LDWP + IAWP, batching off", 0, 1.0), _run("LDWP + IAWP, batching off", 1, 1.0),
            _run(f"{PRIOR_SERVICE_LABEL} (no learned versions)", 0, 110.0),
            _run(f"{PRIOR_SERVICE_LABEL} (no learned versions)", 1, 242.0)]
    paired = paired_ratios(rows)
    assert paired["ldwp_over_mct"]["per_round"] == pytest.approx([1.1, 1.1, 1.1])
    assert paired["ldwp_over_mct"]["geometric_mean"] == pytest.approx(1.1)
    assert paired["ldwp_over_mct"]["ci95"] == pytest.approx([1.1, 1.1])   # no spread at all
    assert paired["ldwp_over_flink_default_distribution"]["geometric_mean"] == \
        pytest.approx(1.21)
    assert paired["mct_over_flink_default_distribution"]["geometric_mean"] == pytest.approx(1.1)
    prior = paired["ldwp_over_its_prior_served"]          # 2 rounds of 3 have the prior
    assert prior["per_round"] == pytest.approx([1.1, 1.0])
    low, high = prior["ci95"]
    assert low < prior["geometric_mean"] < high


@pytest.mark.parametrize("rows, expected", [
    ([], {}),
    # one round: a ratio, no interval
    ([_run(VARIANTS[0][0], 0, 50.0), _run("LDWP + IAWP", 0, 75.0)],
     {"ldwp_over_flink_default_distribution": (1.5, None, [1.5])}),
    # no rate, zero, NaN or a string on one side: that round is skipped, nothing raises
    ([_run(VARIANTS[0][0], 0, None), _run("LDWP + IAWP", 0, 75.0),
      _run(VARIANTS[0][0], 1, 0.0), _run("LDWP + IAWP", 1, 75.0),
      _run(VARIANTS[0][0], 2, float("nan")), _run("LDWP + IAWP", 2, 75.0),
      _run(VARIANTS[0][0], 3, "fast"), _run("LDWP + IAWP", 3, 75.0)], {}),
])
def test_paired_ratios_skip_rounds_without_both_sides(rows, expected):
    from benchmarks.flink_e2e_examples import paired_ratios
    paired = paired_ratios(rows)
    assert sorted(paired) == sorted(expected)
    for name, (mean, ci, per_round) in expected.items():
        assert paired[name]["geometric_mean"] == pytest.approx(mean)
        assert paired[name]["ci95"] == ci and paired[name]["per_round"] == pytest.approx(per_round)


def test_every_variant_runs_before_and_after_its_neighbours():
    """Over two rounds each adjacent pair runs in both orders, and every variant runs once a
    round: a variant after LDWP's run (and its service's training) is not always the same."""
    from benchmarks.flink_e2e_examples import round_order
    variants = ["default", "MCT", "LDWP", "prior", "plain"]
    followed = set()
    for r in range(4):
        order = round_order(variants, r)
        assert sorted(order) == sorted(variants)
        followed |= set(zip(order, order[1:]))
    assert ("LDWP", "prior") in followed and ("prior", "LDWP") in followed
    assert round_order([], 3) == []
