"""The docker-compose demo stack (docker/), validated without a Docker engine.

1. ``docker-compose config`` accepts the file (Debian's docker-compose 1.29; missing binary =
   failure with an install hint, unless STREAMPLACE_SKIP_COMPOSE_CLI=1), and refuses it without
   the required secrets.
2. The file, interpolated, validates against the compose-spec JSON schema that docker-compose
   ships.
3. It agrees with the code and the repository: image versions with the pins, TaskManager
   identities with each other and the cluster spec, environment variables with what the code
   reads, Flink settings with the local cluster's, Kafka settings with the broker template, the
   dashboard's metric names with what the code registers, and every file the images and
   containers read exists.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "flink" / "Dockerfile"
DOCKERIGNORE = DOCKER / "flink" / "Dockerfile.dockerignore"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "streamplace.json"
PROMETHEUS = DOCKER / "prometheus" / "prometheus.yml"
ENV_EXAMPLE = DOCKER / ".env.example"
CODE_PACKAGES = ("streamplace", "workload", "simulator", "placement", "interference",
                 "pyflink_jobs")
#: Code that runs inside a TaskManager's Python workers.
TASKMANAGER_PACKAGES = ("pyflink_jobs", "interference")
#: Variables TaskManager-side code may read but that the stack need not set there.
OPTIONAL_ON_TASKMANAGERS = {"STREAMPLACE_CONFIG", "STREAMPLACE_HOME", "STREAMPLACE_DATA_DIR",
                            "STREAMPLACE_SERVICE_TOKEN", "STREAMPLACE_PROCESS",
                            "STREAMPLACE_HOOK_",  # hook settings, read where a job is built
                            # emulation only (a node slow for one task type): a real GPU host
                            # is as slow as it is
                            "STREAMPLACE_TASK_TYPE_MULTIPLIERS"}
REQUIRED = {"STREAMPLACE_SERVICE_TOKEN": "unit-test-token-0123456789",
            "GRAFANA_ADMIN_PASSWORD": "unit-test-password"}
COMPOSE_SCHEMA = Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")
SKIP_CLI = os.environ.get("STREAMPLACE_SKIP_COMPOSE_CLI") == "1"
INSTALL_HINT = ("install Debian's docker-compose (`apt-get install -y -qq docker-compose`, as "
                ".ci/run does), or set STREAMPLACE_SKIP_COMPOSE_CLI=1 to skip this check")
FLINK_OPERATOR = "flink_taskmanager_job_task_operator_"
#: Flink's own operator metrics the dashboard may use.
FLINK_SYSTEM_METRICS = {"numRecordsIn", "numRecordsOut", "numRecordsInPerSecond",
                        "numRecordsOutPerSecond", "busyTimeMsPerSecond",
                        "backPressuredTimeMsPerSecond"}


# -- helpers -------------------------------------------------------------------------------------
_VAR = re.compile(r"\$(?:\$|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}"
                  r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


class MissingVariable(KeyError):
    pass


def interpolate(value, env: dict):
    """Compose's variable interpolation ($$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e},
    ${VAR?e}) over a loaded YAML document (keys stay as they are)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group("braced") or match.group("plain")
        op, arg = match.group("op"), match.group("arg")
        present = name in env
        empty = not env.get(name)
        if op in (":-", "-"):
            return arg if (empty if op == ":-" else not present) else env[name]
        if op in (":?", "?"):
            if empty if op == ":?" else not present:
                raise MissingVariable(f"{name}: {arg}")
        return env.get(name, "")
    return _VAR.sub(one, value)


def raw_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def compose(env: dict | None = None) -> dict:
    """The compose file with the required variables (and ``env``) set, defaults elsewhere."""
    return interpolate(raw_compose(), {**REQUIRED, **(env or {})})


def services() -> dict:
    return compose()["services"]


def taskmanagers() -> dict[str, dict]:
    return {name: svc for name, svc in services().items()
            if (svc.get("command") or [None])[0] == "taskmanager"}


def dynamic_properties(command: list[str]) -> dict[str, str]:
    """``-D key=value`` pairs of a Flink command line."""
    props = {}
    for flag, value in zip(command, command[1:]):
        if flag == "-D":
            key, _, val = value.partition("=")
            props[key] = val
    return props


def flink_properties(text: str) -> dict[str, str]:
    """FLINK_PROPERTIES as the official image's entrypoint reads it: one ``key: value`` a line,
    split at the first colon, trimmed."""
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line:
            key, _, value = line.partition(":")
            props[key.strip()] = value.strip()
    return props


def dockerfile_lines() -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments dropped."""
    lines, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            lines.append(current.strip())
        current = ""
    return lines


def dockerfile_args() -> dict[str, str]:
    args = {}
    for line in dockerfile_lines():
        if line.startswith("ARG ") and "=" in line:
            key, _, value = line[4:].partition("=")
            args[key.strip()] = value.strip()
    return args


def build_context() -> Path:
    build = raw_compose()["x-streamplace-image"]["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    return (COMPOSE.parent / build["context"]).resolve()


def copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY without --from."""
    out = []
    for line in dockerfile_lines():
        if line.startswith("COPY ") and "--from" not in line:
            parts = [p for p in line.split()[1:] if not p.startswith("--")]
            out.append((parts[:-1], parts[-1]))
    return out


def repo_path_for(image_path: str) -> Path:
    """The repository file a path inside the image comes from (by the Dockerfile's COPYs)."""
    for sources, dest in copies():
        if len(sources) == 1 and not dest.endswith("/"):
            if image_path == dest or image_path.startswith(dest.rstrip("/") + "/"):
                return build_context() / sources[0] / image_path[len(dest.rstrip("/")):].lstrip("/")
        for source in sources:
            if dest.endswith("/") and image_path == dest + Path(source).name:
                return build_context() / source
    raise AssertionError(f"{image_path} is not COPYed into the image by {DOCKERFILE}")


def image_env() -> dict[str, str]:
    env = {}
    for line in dockerfile_lines():
        if line.startswith("ENV "):
            for key, value in re.findall(r"(\w+)=(\S+)", line[4:]):
                env[key] = value
    return env


def code_files(packages=CODE_PACKAGES):
    for package in packages:
        yield from (ROOT / package).rglob("*.py")


_ENV_NAME = r"(STREAMPLACE_[A-Z0-9_]+|CUDA_VISIBLE_DEVICES)"


def variables_read_by(packages=CODE_PACKAGES) -> set[str]:
    """Environment variables the code reads: os.environ.get / getenv / environ[...] with the
    name as a literal or as a module constant."""
    read = set()
    for path in code_files(packages):
        text = path.read_text()
        if "environ" not in text and "getenv" not in text:
            continue
        read |= set(re.findall(r"(?:\.get|getenv|\.pop|\.setdefault)\(\s*[\"']" + _ENV_NAME
                               + r"[\"']", text))
        read |= set(re.findall(r"environ\[\s*[\"']" + _ENV_NAME + r"[\"']\s*\](?!\s*=[^=])",
                               text))
        for const, name in re.findall(r"^\s*([A-Z_][A-Z0-9_]*)\s*=\s*[\"']" + _ENV_NAME
                                      + r"[\"']", text, re.M):
            if re.search(r"(?:\.get|getenv|environ\[)\(?\s*" + const + r"\b", text):
                read.add(name)
    return read


def pom_property(name: str) -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    value = ET.parse(ROOT / "kafka" / "pom.xml").getroot().find(f"m:properties/m:{name}", ns)
    assert value is not None, name
    return value.text.strip()


def pinned_flink_version() -> str:
    constraints = re.search(r"^apache-flink==(\S+)$", (ROOT / "constraints.txt").read_text(),
                            re.M)
    project = re.search(r"\"apache-flink==([^\"]+)\"", (ROOT / "pyproject.toml").read_text())
    assert constraints and project and constraints.group(1) == project.group(1)
    return project.group(1)


def compose_cli() -> list[str] | None:
    exe = shutil.which("docker-compose")
    return [exe] if exe else None


# -- 1. the compose CLI --------------------------------------------------------------------------
def _run_compose(env_vars: dict, tmp_path) -> subprocess.CompletedProcess:
    cli = compose_cli()
    if cli is None:
        if SKIP_CLI:
            pytest.skip("STREAMPLACE_SKIP_COMPOSE_CLI=1")
        pytest.fail(f"docker-compose is not installed: {INSTALL_HINT}")
    env_file = tmp_path / "test.env"  # never the user's docker/.env
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env_vars.items()))
    env = {k: v for k, v in os.environ.items() if k not in REQUIRED}
    return subprocess.run([*cli, "-f", str(COMPOSE), "--env-file", str(env_file), "config", "-q"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_docker_compose_config_accepts_the_file(tmp_path):
    result = _run_compose(REQUIRED, tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_docker_compose_config_refuses_the_file_without_a_secret(tmp_path, missing):
    result = _run_compose({k: v for k, v in REQUIRED.items() if k != missing}, tmp_path)
    assert result.returncode != 0
    assert missing in result.stderr + result.stdout


# -- 2. the compose-spec schema ------------------------------------------------------------------
def compose_schema() -> dict:
    if not COMPOSE_SCHEMA.is_file():
        if SKIP_CLI:
            pytest.skip("STREAMPLACE_SKIP_COMPOSE_CLI=1 and no compose-spec schema")
        pytest.fail(f"the compose-spec schema ({COMPOSE_SCHEMA}) comes with docker-compose: "
                    f"{INSTALL_HINT}")
    return json.loads(COMPOSE_SCHEMA.read_text())


def test_compose_file_validates_against_the_compose_spec_schema():
    from jsonschema import Draft201909Validator
    schema = compose_schema()
    # The schema names draft 2019-09 (as "http://json-schema.org/draft/2019-09/schema#", a
    # spelling jsonschema does not recognise, hence explicit).
    validator = Draft201909Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(compose())]
    assert not errors, "\n".join(errors)
    # The schema is strict enough to catch a typo (else this test proves nothing).
    broken = compose()
    broken["services"]["jobmanager"]["restartt"] = "always"
    assert list(validator.iter_errors(broken))


# -- 3. agreement with the code and the repository -----------------------------------------------
def test_image_versions_match_the_pins():
    svc = services()
    assert svc["kafka"]["image"] == f"apache/kafka:{pom_property('kafka.version')}"
    base = [line.split()[1] for line in dockerfile_lines() if line.startswith("FROM ")]
    assert base == [f"flink:{pinned_flink_version()}-java17"], base
    args = dockerfile_args()
    assert args["KAFKA_CONNECTOR_VERSION"] == pom_property("flink.kafka.connector.version")
    assert re.fullmatch(r"[0-9a-f]{40}", args["KAFKA_CONNECTOR_SHA1"])
    assert re.fullmatch(r"[0-9a-f]{128}", args["KAFKA_CONNECTOR_SHA512"])
    text = DOCKERFILE.read_text()
    assert "flink-sql-connector-kafka/${KAFKA_CONNECTOR_VERSION}/" in text
    assert 'sha1sum -c' in text and 'sha512sum -c' in text and '"${url}.sha1"' in text
    # The pinned sha1 is Maven Central's (as Maven recorded it here when `make jars` ran).
    version = args["KAFKA_CONNECTOR_VERSION"]
    recorded = (Path.home() / ".m2/repository/org/apache/flink/flink-sql-connector-kafka"
                / version / f"flink-sql-connector-kafka-{version}.jar.sha1")
    if recorded.is_file():
        assert recorded.read_text().split()[0] == args["KAFKA_CONNECTOR_SHA1"]
    submit = (DOCKER / "streamplace" / "submit_job.py").read_text()
    assert f"flink-sql-connector-kafka-{version}.jar" in submit
    project = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert raw_compose()["x-streamplace-image"]["image"] == f"streamplace/flink:{project.group(1)}"


def test_images_are_pinned_and_ports_bind_loopback():
    images = [svc["image"] for svc in services().values()]
    images += [line.split()[1] for line in dockerfile_lines() if line.startswith("FROM ")]
    for image in images:
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and "/" not in tag, image
    for name, svc in services().items():
        for port in svc.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:
                assert str(port).startswith("127.0.0.1:"), (name, port)
        assert "network_mode" not in svc, name  # host networking would bypass the bindings


def test_taskmanager_identity_resources_and_spec_agree():
    from streamplace.cluster_spec import load_cluster_spec
    tms = taskmanagers()
    assert len(tms) >= 2
    config_path = image_env()["STREAMPLACE_CONFIG"]
    config = yaml.safe_load(repo_path_for(config_path).read_text())
    spec = load_cluster_spec(repo_path_for(config["flink"]["cluster_spec"]))
    assert config["service"]["cluster_spec"] == config["flink"]["cluster_spec"]
    by_id = {tm.id: tm for tm in spec.taskmanagers}
    seen = set()
    for name, svc in tms.items():
        props, env = dynamic_properties(svc["command"]), svc["environment"]
        node = props["taskmanager.resource-id"]
        assert props["external-resources"].split(";") == [node, "streamplace_router"], name
        assert node == env["STREAMPLACE_NODE_ID"], name
        assert props["external-resource.streamplace_router.amount"] == "1", name
        amount = int(props[f"external-resource.{node}.amount"])
        assert int(props["taskmanager.numberOfTaskSlots"]) == amount
        tm = by_id[node]
        assert tm.slots == amount, node
        assert float(props["taskmanager.cpu.cores"]) == tm.cpu_cores == float(svc["cpus"]), node
        assert float(env["STREAMPLACE_WORK_MULTIPLIER"]) == tm.work_multiplier, node
        for threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            assert int(env[threads]) == tm.threads, (node, threads)
        assert tm.gpu_ids == [0], node
        seen.add(node)
    assert seen == set(by_id)
    # Heterogeneous: not all the same CPUs, slots and speed.
    for key in ("cpus",):
        assert len({svc[key] for svc in tms.values()}) == len(tms)
    assert len({tm.work_multiplier for tm in spec.taskmanagers}) > 1
    assert len({tm.slots for tm in spec.taskmanagers}) > 1


def test_each_taskmanager_reserves_its_own_gpu():
    tms = taskmanagers()
    device_ids = []
    for name, svc in tms.items():
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1, name
        device = devices[0]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
        assert len(device["device_ids"]) == 1, name
        device_ids += device["device_ids"]
        env = svc["environment"]
        assert env["CUDA_VISIBLE_DEVICES"] == "0", name  # the reserved GPU, inside the container
        assert {"compute", "utility"} <= set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")), name
    assert len(set(device_ids)) == len(tms), device_ids  # by default each has its own GPU


def test_taskmanagers_set_what_the_code_reads_and_every_variable_is_read():
    needed = variables_read_by(TASKMANAGER_PACKAGES) - OPTIONAL_ON_TASKMANAGERS
    assert {"STREAMPLACE_NODE_ID", "STREAMPLACE_WORK_MULTIPLIER", "CUDA_VISIBLE_DEVICES"} <= needed
    for name, svc in taskmanagers().items():
        missing = needed - set(svc["environment"])
        assert not missing, (name, missing)
    read = variables_read_by()
    set_in_compose = {key for svc in services().values()
                      for key in (svc.get("environment") or {}) if key.startswith("STREAMPLACE_")}
    set_in_compose |= {k for k in image_env() if k.startswith("STREAMPLACE_")}
    set_in_compose |= set(re.findall(r"\$\{(STREAMPLACE_[A-Z0-9_]+)", COMPOSE.read_text()))
    unread = set_in_compose - read
    assert not unread, f"set in docker/ but read nowhere in the code: {sorted(unread)}"


def test_flink_settings_match_the_local_cluster():
    from streamplace.config import load_config
    from streamplace.flink_cluster import FlinkCluster
    local = FlinkCluster(load_config()).files.common_config()
    svc = services()
    flink_services = {"jobmanager": svc["jobmanager"], **taskmanagers()}

    def norm(value) -> str:
        return str(value).lower().replace(" ", "")
    for name, service in flink_services.items():
        props = flink_properties(service["environment"]["FLINK_PROPERTIES"])
        for key in ("cluster.fine-grained-resource-management.enabled", "heartbeat.interval",
                    "heartbeat.timeout", "restart-strategy.type",
                    "restart-strategy.fixed-delay.attempts", "restart-strategy.fixed-delay.delay",
                    "execution.checkpointing.externalized-checkpoint-retention"):
            assert norm(props[key]) == norm(local[key]), (name, key)
        venv_python = props["python.executable"]
        assert props["python.client.executable"] == venv_python
        assert f"python3 -m venv {venv_python.rsplit('/bin/', 1)[0]}" in DOCKERFILE.read_text()
        assert props["metrics.reporter.prom.factory.class"] == \
            "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
        assert props["metrics.reporter.prom.port"] == "9249"
        assert props["jobmanager.rpc.address"] == "jobmanager" and "jobmanager" in svc
        for key in ("execution.checkpointing.dir", "execution.checkpointing.savepoint-dir"):
            folder = props[key].removeprefix("file://")
            mounts = [v.split(":")[1] for v in service.get("volumes", [])]
            assert any(folder.startswith(m) for m in mounts), (name, key, "not on a shared volume")
    # The image provides the Prometheus reporter plugin (or fails its build).
    assert "/opt/flink/plugins/metrics-prometheus/flink-metrics-prometheus-*.jar" in \
        DOCKERFILE.read_text()


def test_kafka_is_configured_like_the_local_broker():
    from streamplace.config import load_config
    env = {k: str(v) for k, v in services()["kafka"]["environment"].items()}
    template = (ROOT / "kafka" / "server.properties.template").read_text()
    # Listener names differ on purpose (INTERNAL for containers, HOST for this machine).
    own_listeners = {"inter.broker.listener.name", "listener.security.protocol.map"}
    checked = 0
    for line in template.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        if "${" in value or key in own_listeners:
            continue
        assert env.get("KAFKA_" + key.upper().replace(".", "_")) == value, key
        checked += 1
    assert checked >= 10
    defaults = load_config()
    config = load_config(repo_path_for(image_env()["STREAMPLACE_CONFIG"]))
    assert env["KAFKA_NUM_PARTITIONS"] == str(config.kafka.topic_partitions)
    assert env["KAFKA_TRANSACTION_MAX_TIMEOUT_MS"] == \
        str(config.kafka.transaction_max_timeout_ms) == \
        str(defaults.kafka.transaction_max_timeout_ms)
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["INTERNAL"] == config.kafka.bootstrap_servers
    assert advertised["HOST"].startswith("127.0.0.1:")
    assert config.flink.rest_url == "http://jobmanager:8081"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == \
        f"{env['KAFKA_NODE_ID']}@kafka:{config.kafka.controller_port}"


def test_streamplace_commands_parse_with_the_real_cli():
    from pyflink_jobs.task_pipeline import parse_args, parse_plan
    from streamplace.cli import build_parser
    from streamplace.config import load_config
    svc = services()
    cli = "/opt/streamplace/venv/bin/streamplace"
    uses_cli = {name for name, s in svc.items() if s.get("entrypoint") == [cli]}
    assert {"kafka-init", "placement", "replay"} <= uses_cli
    for name in uses_cli:
        args = build_parser().parse_args(svc[name]["command"])
        assert args.func is not None, name
    assert svc["placement"]["command"][:3] == ["serve", "--host", "0.0.0.0"]
    assert svc["replay"]["environment"]["STREAMPLACE_DATA_DIR"] == "/data"
    assert any(v.endswith(":/data:ro") for v in svc["replay"]["volumes"])
    # The submitter's flags are task_pipeline.py's, with the hook on.
    entry = svc["submit-job"]["entrypoint"]
    script = repo_path_for(entry[1])
    spec = importlib.util.spec_from_file_location("submit_job", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = load_config(repo_path_for(image_env()["STREAMPLACE_CONFIG"]))
    settings = parse_args(module.pipeline_args(config, svc["submit-job"]["environment"]))
    assert settings.placement == "hook" and settings.executor == "iawp"
    assert settings.service_url == "http://placement:8471"
    assert settings.service_token == REQUIRED["STREAMPLACE_SERVICE_TOKEN"]
    assert settings.bootstrap_servers == config.kafka.bootstrap_servers
    assert repo_path_for(settings.cluster_spec).is_file()
    assert repo_path_for(module.PIPELINE).is_file()
    parse_plan(settings.plan)
    plan = compose({"JOB_PLAN": "tm_fast=3,tm_slow=1"})["services"]["submit-job"]["environment"]
    assert parse_plan(plan["JOB_PLAN"]) == {"tm_fast": 3, "tm_slow": 1}


def test_everything_the_images_and_containers_read_exists():
    context = build_context()
    ignore = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"  # an allow-list: .venv, .streamplace, data never reach the context
    included = {line[1:] for line in ignore if line.startswith("!")}
    for sources, _ in copies():
        for source in sources:
            assert (context / source).exists(), f"COPY {source}: missing"
            assert source in included, f"COPY {source}: excluded by {DOCKERIGNORE.name}"
    # Everything the wheel is built from reaches the image.
    pyproject = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r'packages = \[([^\]]*)\]', pyproject).group(1)
    copied = {s for sources, _ in copies() for s in sources}
    for package in re.findall(r'"([^"]+)"', packages) + ["kafka", "README.md", "pyproject.toml",
                                                          "constraints.txt"]:
        assert package in copied, package
    # Relative bind mounts are repository paths (the data folder is the user's).
    for name, svc in services().items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (COMPOSE.parent / source).exists(), (name, volume)
    raw = raw_compose()["services"]["replay"]["volumes"][0]
    assert raw.startswith("${STREAMPLACE_DATA_DIR:-")
    from workload.traces.datadir import checkout_data_dir
    default = raw.split(":-", 1)[1].split("}", 1)[0]
    assert (COMPOSE.parent / default).resolve() == checkout_data_dir().resolve()


def _registered_names() -> tuple[set[str], set[str], set[str]]:
    """(exact Flink operator metric names the code registers, name prefixes of per-node
    metrics, service metric sample names)."""
    exact, prefixes = set(), set()
    for path in sorted((ROOT / "pyflink_jobs").glob("*.py")):
        text = path.read_text()
        exact |= set(re.findall(r"[\"'](streamplace_[a-z0-9_]+)[\"']", text))
        prefixes |= set(re.findall(r"f[\"'](streamplace_[a-z0-9_]+_)\{", text))
    from placement.service.metrics import ServiceMetrics
    service = set()
    for metric in ServiceMetrics().registry.collect():
        service.add(metric.name + ("_total" if metric.type == "counter" else ""))
    return exact, prefixes, service


def test_grafana_dashboard_uses_metrics_the_code_registers():
    dashboard = json.loads(DASHBOARD.read_text())
    exact, prefixes, service = _registered_names()
    assert "streamplace_routed_" in prefixes and "streamplace_tasks_ok" in exact
    # Per-node gauges (streamplace_routed_<node>) reach the dashboard folded by Prometheus into
    # one metric with a node label (metric_relabel_configs).
    folded = set()
    for job in yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]:
        rules = job.get("metric_relabel_configs", [])
        for rule in rules:
            match = re.fullmatch(re.escape(FLINK_OPERATOR) + r"(streamplace_[a-z0-9_]+_)\(\.\+\)",
                                 rule["regex"])
            if rule["target_label"] == "__name__" and match:
                assert match.group(1) in prefixes, rule
                assert rule["replacement"] == FLINK_OPERATOR + match.group(1).rstrip("_")
                assert any(r["regex"] == rule["regex"] and r["target_label"] == "node"
                           and r["replacement"] == "$1" for r in rules), "no node label"
                folded.add(match.group(1).rstrip("_"))
    assert "streamplace_routed" in folded
    datasource = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yml")
                                .read_text())["datasources"][0]
    used = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            for name in re.findall(r"\b((?:flink|streamplace)_[A-Za-z0-9_]+)", expr):
                used.add(name)
                if name.startswith(FLINK_OPERATOR):
                    metric = name[len(FLINK_OPERATOR):]
                    ok = metric in exact or metric in FLINK_SYSTEM_METRICS or metric in folded
                else:
                    ok = name in service
                assert ok, f"panel {panel['title']!r}: {name} is not registered by the code"
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("throughput", "per node", "gpu", "decisions per second", "model version"):
        assert topic in titles, topic
    for needed in ("streamplace_service_node_gpu_util", "streamplace_service_node_queue_depth",
                   "streamplace_service_model_version", FLINK_OPERATOR + "streamplace_routed",
                   FLINK_OPERATOR + "streamplace_model_version"):
        assert needed in used, needed
    # Provisioning points at the mounted dashboards.
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/streamplace.yml")
                              .read_text())["providers"][0]
    grafana = services()["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"] if v.startswith("./"))
    assert (COMPOSE.parent / {t: s for s, t in mounts.items()}[provider["options"]["path"]]
            / DASHBOARD.name).resolve() == DASHBOARD
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == provider["options"]["path"] + "/" + DASHBOARD.name


def test_prometheus_scrapes_every_metrics_endpoint():
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {t for job in config["scrape_configs"] for group in job["static_configs"]
               for t in group["targets"]}
    svc = services()
    expected = {f"{svc['jobmanager']['hostname']}:9249"}
    expected |= {f"{s['hostname']}:9249" for s in taskmanagers().values()}
    expected.add(f"{svc['placement']['hostname']}:8471")
    assert targets == expected
    placement = next(j for j in config["scrape_configs"] if j["job_name"] == "placement")
    token_file = placement["authorization"]["credentials_file"]
    command = " ".join(svc["prometheus"]["command"])
    assert f"> {token_file}" in command and "$STREAMPLACE_SERVICE_TOKEN" in command
    assert "--config.file=/etc/prometheus/prometheus.yml" in command
    assert any(v.startswith("./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml")
               for v in svc["prometheus"]["volumes"])


def test_secrets_are_required_and_nothing_has_a_default_password():
    text = COMPOSE.read_text()
    for name in REQUIRED:
        uses = re.findall(r"\$\{" + name + r"([^}]*)\}", text)
        assert uses and all(u.startswith(":?") for u in uses), (name, uses)
    for name, svc in raw_compose()["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if re.search(r"PASSWORD|TOKEN|SECRET", key):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", str(value)), (name, key, value)
    grafana = services()["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["GF_USERS_ALLOW_SIGN_UP"] == "false"
    example = dict(line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines()
                   if line and not line.startswith("#"))
    for name in REQUIRED:
        assert example[name] == "", name
    assert ".env" in (DOCKER / ".gitignore").read_text().split()
    # Every variable the compose file uses is documented in .env.example, and nothing more.
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    assert used == set(example), used ^ set(example)


def test_readme_says_it_has_not_run_on_a_gpu_host():
    readme = (DOCKER / "README.md").read_text()
    assert "not yet run on a GPU host" in readme
    for name in re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()):
        assert name in readme, name
