"""The one streamplace configuration: typed, validated, loadable from YAML, overridable by flags.

Each component owns its settings block; this module composes them. Precedence, lowest first:
built-in defaults < ``--config FILE`` (or ``$STREAMPLACE_CONFIG``) < ``--set section.key=value``.

Example::

    >>> cfg = load_config(overrides=["kafka.port=19092"])
    >>> cfg.kafka.bootstrap_servers
    '127.0.0.1:19092'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from placement.service.settings import ServiceSettings  # pydantic only: no torch, no FastAPI
from streamplace.resources import default_home
from workload.cluster_spec import PlainYamlError, parse_plain_yaml, read_plain_yaml

__all__ = ["config_reference", "KafkaSettings", "FlinkSettings", "JobSettings", "ServiceSettings",
           "StreamplaceConfig",
           "load_config", "ConfigError"]


class ConfigError(ValueError):
    """A configuration file or override that cannot be used, with the reason."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class KafkaSettings(_Section):
    """The local single-node KRaft broker (``streamplace kafka ...``)."""

    host: str = Field("127.0.0.1", description="address the broker binds and advertises")
    port: int = Field(9092, ge=1, le=65535, description="PLAINTEXT listener")
    controller_port: int = Field(9093, ge=1, le=65535, description="KRaft CONTROLLER listener")
    heap_mb: int = Field(512, ge=128, description="broker JVM heap (-Xmx and -Xms)")
    start_timeout_s: float = Field(90.0, gt=0, description="wait for 'Kafka Server started'")
    transaction_max_timeout_ms: int = Field(
        900_000, description="broker transaction.max.timeout.ms; Flink's transaction timeout "
                             "must stay below it")
    topic_partitions: int = Field(3, ge=1, description="partitions of each streamplace topic")

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"


class FlinkSettings(_Section):
    """The local standalone Flink cluster (``streamplace cluster ...``)."""

    host: str = "127.0.0.1"
    rest_port: int = Field(8081, ge=1, le=65535, description="JobManager REST API and web UI")
    rpc_port: int = Field(6123, ge=1, le=65535, description="JobManager RPC")
    jobmanager_memory_mb: int = Field(1024, ge=768, description="JobManager process size")
    cluster_spec: str = Field(
        "default", description="a shipped spec name (see workload/specs) or a YAML path")
    start_timeout_s: float = Field(120.0, gt=0, description="wait for every TaskManager")
    extra_config: dict[str, str] = Field(
        default_factory=dict, description="more Flink options for every process (flat keys)")
    python_execution_mode: Literal["process", "thread"] = Field(
        "process", description="PyFlink's python.execution-mode for the cluster's jobs: "
        "'process' (Python workers beside the JVM, Flink's default) or 'thread' (Python inside "
        "the TaskManager JVM through pemja: no serialisation hop per record; the hook then "
        "runs one-step CPU operators only, PyFlink 2.2 has no async functions in thread mode)")
    hosts_prefix: str = Field("sp", pattern=r"^[a-z][a-z0-9]{0,9}$", description="name prefix "
                              "of the emulated hosts' namespaces, links and cgroups "
                              "(isolation: host)")
    hosts_subnet: str = Field("10.213.0.0/24", description="private subnet of the emulated "
                              "hosts; its first address is the head host's (isolation: host)")

    @field_validator("hosts_subnet")
    @classmethod
    def _private_ipv4_network(cls, value: str) -> str:
        import ipaddress
        try:
            net = ipaddress.IPv4Network(value, strict=True)
        except ValueError as err:
            raise ValueError(f"{value!r} is not an IPv4 network such as 10.213.0.0/24 "
                             f"({err})") from None
        if not net.is_private or net.prefixlen > 29:
            raise ValueError(f"{value} must be a private range with room for hosts (/29 or "
                             "larger)")
        return value

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"


class JobSettings(_Section):
    """Settings of the streamplace PyFlink jobs."""

    checkpoint_interval_ms: int = Field(2000, ge=100, description="also the exactly-once commit "
                                        "cadence: results become visible to read_committed "
                                        "readers at each checkpoint")
    transaction_timeout_ms: int = Field(600_000, description="must be below the broker's "
                                        "transaction.max.timeout.ms")
    executor_capacity: int = Field(16, ge=1, description="in-flight tasks per executor instance "
                                   "(AsyncDataStream capacity)")
    executor_timeout_s: float = Field(60.0, gt=0, description="per-task async timeout")
    parallelism: int = Field(1, ge=1, description="default operator parallelism")
    topic_tasks: str = "tasks"
    topic_results: str = "results"
    topic_feedback: str = "feedback"
    topic_dead_letter: str = "dead-letter"


class StreamplaceConfig(_Section):
    home: Path = Field(default_factory=default_home, validate_default=True,
                       description="runtime folder: data, logs, jars, pid files")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    flink: FlinkSettings = Field(default_factory=FlinkSettings)
    job: JobSettings = Field(default_factory=JobSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings,
                                     description="the placement service (streamplace serve); "
                                     "unset Kafka, Flink, spec and model_dir settings follow "
                                     "the kafka, flink and job sections and home/models")

    @field_validator("home", mode="before")
    @classmethod
    def _absolute(cls, value) -> Path:
        # "" would be the current folder (in a checkout, its kafka/ sources as kafka_dir); a
        # file would fail later as NotADirectoryError deep inside a start
        if value is None or str(value).strip() == "":
            raise ValueError("home must name a folder, not be empty")
        try:
            path = Path(value).expanduser().resolve()
        except RuntimeError as exc:   # ~nosuchuser
            raise ValueError(f"home {value!r}: {exc}") from None
        if path.exists() and not path.is_dir():
            raise ValueError(f"home {path} is a file, not a folder")
        return path

    def validate_cross_fields(self) -> None:
        if self.job.transaction_timeout_ms >= self.kafka.transaction_max_timeout_ms:
            raise ConfigError(
                f"job.transaction_timeout_ms ({self.job.transaction_timeout_ms}) must be below "
                f"kafka.transaction_max_timeout_ms ({self.kafka.transaction_max_timeout_ms}), "
                "else the broker refuses Flink's transactions")
        ports = {"kafka.port": self.kafka.port, "kafka.controller_port": self.kafka.controller_port,
                 "flink.rest_port": self.flink.rest_port, "flink.rpc_port": self.flink.rpc_port}
        if len(set(ports.values())) != len(ports):
            raise ConfigError(f"ports must differ: {ports}")

    # Paths under home -----------------------------------------------------------------------
    @property
    def jars_dir(self) -> Path:
        return self.home / "jars"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def flink_dir(self) -> Path:
        return self.home / "flink"


#: the largest configuration file read (a real one is a few KB; a 10 MB one took 9 s)
MAX_CONFIG_BYTES = 1 << 20


def _plain_yaml(text: str, what: str):
    """``text`` parsed as plain YAML (no anchors or aliases: a 289-byte alias bomb took 5.7 s
    and 510 MB before); ConfigError naming ``what`` for anything else."""
    try:
        return parse_plain_yaml(text, what)
    except PlainYamlError as exc:
        raise ConfigError(str(exc)) from None


def _set_dotted(data: dict[str, Any], dotted: str, raw_value: str) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {key!r} is not a section")
    node[keys[-1]] = _plain_yaml(raw_value, f"--set {dotted}") if raw_value != "" else ""


def load_config(path: str | os.PathLike | None = None,
                overrides: list[str] | None = None) -> StreamplaceConfig:
    """Defaults, then the YAML file (``path`` or ``$STREAMPLACE_CONFIG``), then ``key=value``
    overrides with dotted keys (values parsed as YAML scalars)."""
    data: dict[str, Any] = {}
    path = path or os.environ.get("STREAMPLACE_CONFIG")
    if path:
        file = Path(path)
        if file.is_dir():
            raise ConfigError(f"configuration file {file} is a directory")
        if not file.is_file():
            raise ConfigError(f"configuration file {file} does not exist")
        try:
            loaded = read_plain_yaml(file, MAX_CONFIG_BYTES, f"configuration file {file}") or {}
        except PlainYamlError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file} must hold a mapping of sections, not {type(loaded).__name__}")
        data.update(loaded)
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        _set_dotted(data, key.strip(), value.strip())
    try:
        config = StreamplaceConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration:\n{exc}") from exc
    config.validate_cross_fields()
    # With ``isolation: host`` every client must reach the broker and the JobManager at the
    # head address (the bridge), from the head host and from inside the hosts alike.
    from streamplace.flink_hosts import with_host_addresses  # it needs this module's types
    return with_host_addresses(config)


def config_reference() -> str:
    """Every setting as a markdown table (key, default, what it does), from the models
    themselves, so the reference cannot drift from the code (the README's copy is tested)."""
    rows = ["| setting | default | what it does |", "|---|---|---|"]

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name}.")
                continue
            if field.default_factory is not None:
                default = "(computed)" if name == "home" else repr(field.default_factory())
            else:
                default = repr(field.default)
            text = (field.description or "").replace("|", "\\|")
            rows.append(f"| `{prefix}{name}` | `{default}` | {text} |")

    walk(StreamplaceConfig, "")
    return "\n".join(rows)
