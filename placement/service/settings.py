"""Settings of the placement service (``streamplace serve``): one validated pydantic model.

Only pydantic is imported here (no torch, no FastAPI), so ``streamplace.config`` can compose this
block into the one configuration file without slowing the CLI's start-up.

Security rule, checked when the service starts (:meth:`ServiceSettings.check_security`): the
service listens on loopback by default; binding any other address requires a bearer ``token``
(else anyone on the network could read the cluster view and steer placement).

Example::

    >>> s = ServiceSettings(port=9000)
    >>> s.url
    'http://127.0.0.1:9000'
    >>> ServiceSettings(host="0.0.0.0", token="a-long-secret").token is not None
    True
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ServiceSettings", "is_loopback", "INSECURE_HOST_MESSAGE"]

INSECURE_HOST_MESSAGE = (
    "the placement service would listen on {host!r}, which is not a loopback address, without "
    "a token: set service.token, --token or $STREAMPLACE_SERVICE_TOKEN so every request must carry "
    "'Authorization: Bearer <token>', or keep host=127.0.0.1")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve to anything


class ServiceSettings(BaseModel):
    """Everything ``streamplace serve`` and :class:`placement.service.PlacementService` read."""

    model_config = ConfigDict(extra="forbid")

    # -- HTTP ------------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="address the HTTP API binds; loopback by default")
    port: int = Field(8471, ge=0, le=65535, description="HTTP port (0: any free port, tests)")
    token: str | None = Field(None, min_length=8, description="bearer token required on every "
                              "endpoint except /health; mandatory when host is not loopback")
    # -- Kafka feedback --------------------------------------------------------------------------
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap.servers")
    feedback_topic: str = Field("feedback", description="topic of NodeFeedback records")
    group_id: str = Field("streamplace-service", description="consumer group of the service")
    consume_feedback: bool = Field(True, description="run the Kafka feedback consumer (off: "
                                   "HTTP API only, e.g. decide with an initial model)")
    poll_timeout_s: float = Field(0.5, gt=0, description="consumer poll timeout; also bounds "
                                  "how long stop() waits for the poll loop")
    consume_batch: int = Field(500, ge=1, description="messages per consume() call; offsets "
                               "are committed once per batch, after the learner took it")
    dedup_capacity: int = Field(200_000, ge=1, description="task ids remembered to drop "
                                "re-delivered timings (LRU)")
    # -- Flink -----------------------------------------------------------------------------------
    flink_rest_url: str = Field("http://127.0.0.1:8081", description="JobManager REST API")
    flink_timeout_s: float = Field(1.0, gt=0, description="timeout of each Flink REST call")
    # -- cluster and models ----------------------------------------------------------------------
    cluster_spec: str = Field("default", description="cluster spec name (workload/specs) or "
                              "YAML path: node capacities for the plan and the cost model")
    gpu_model: str = Field("t4", description="GPU model assumed for the spec's GPUs (local "
                           "cluster specs list GPU ids, not models): one the calibration knows, "
                           "or '<model>:<speed>' for another (speed relative to the reference "
                           "GPU, e.g. 'h100:9.5')")
    model_dir: Path | None = Field(None, description="where model versions are kept; None: "
                                   "<streamplace home>/models")
    max_models: int = Field(20, ge=1, description="versions kept on disk (oldest pruned)")
    initial_model: Path | None = Field(None, description="pre-trained model file (one that "
                                       "python -m benchmarks.ship_models writes), or "
                                       "'shipped:residual' / 'shipped:size_agnostic' "
                                       "(placement/models), published as version 1 of an "
                                       "empty store")
    # -- learning --------------------------------------------------------------------------------
    publish_prior: bool = Field(True, description="without initial_model, publish the "
                                "untrained starting weights (the prior: MCT's completion "
                                "estimate at the learned costs) as version 1 of an empty "
                                "store, so routers decide with LDWP from their first task; "
                                "false: they use their fallback rule until a learned version")
    policy: str = Field("ldwp", description="the learned policy (only 'ldwp' today)")
    network: str = Field("node_scoring", description="LDWP network; the service needs the "
                         "size-agnostic 'node_scoring' (nodes join and leave)")
    reward: str = Field("task_latency", description="LDWP reward; feedback carries per-task "
                        "latencies, so 'task_latency'")
    learning: dict[str, Any] = Field(default_factory=dict, description="more LDWPSettings "
                                     "fields (placement.ldwp.agent), e.g. {learning_rate: 0.01}")
    judge: Literal["drain", "latency"] = Field(
        "drain", description="what the learner learns of each completed task: 'drain', the time "
        "its node took to work off what it held when the task was sent plus the task "
        "(placement.service.drain_judge), or 'latency', the task's own")
    publish_every: int = Field(500, ge=1, description="publish a new model version after this "
                               "many NEW feedback task records trained on")
    min_records_first_version: int = Field(1000, ge=1, description="task records needed before "
                                           "the first learned version (and the burst check "
                                           "judges versions on at least this many tasks)")
    trial_window_tasks: int = Field(200, ge=0, description="the version trial: a version that "
                                    "passed the checks is tried against the one before it "
                                    "(see trial_share) in blocks, or windows, each closed once "
                                    "this many of each arm's tasks were judged, and serves for "
                                    "good only if its tasks drained faster; 0: no trial, every "
                                    "version that passes serves")
    trial_share: float = Field(0.1, gt=0, le=1, description="the candidate's share of the "
                               "tasks while on trial: every router decides this share of its "
                               "tasks (by a hash of the task id) with it and the rest with the "
                               "champion, and each window pair is a block of both arms' tasks "
                               "judged in the same period (placement.service."
                               "interleaved_trial); 1: alternating windows, in which the "
                               "candidate decides every task (placement.service.version_trial)")
    trial_confirm_share: float = Field(0.5, ge=0, lt=1, description="with trial_share below "
                                       "1: a candidate that won at trial_share is tried again "
                                       "deciding this larger share of the tasks, and promoted "
                                       "only if it wins there too (placement.service."
                                       "interleaved_trial, the confirmation stage); 0, or not "
                                       "above trial_share: promoted after the first stage")
    trial_pairs: int = Field(4, ge=1, description="(candidate, champion) window pairs (or "
                             "blocks) per trial")
    trial_min_wins: int = Field(3, ge=1, description="window pairs a candidate must win (and "
                                "on average) to be promoted")
    history_per_node: int = Field(512, ge=1, description="NodeFeedback reports kept per node to "
                                  "reconstruct node states at decision time")
    absent_after_s: float = Field(30.0, ge=0.0, le=86_400.0, description="a cluster-spec node "
                                  "that has not reported this long after the first report "
                                  "is left out of /decide, /health and training (not in "
                                  "this cluster: the default spec's tm_c beside tm_a and "
                                  "tm_b); it counts again when it reports")
    torch_threads: int = Field(1, ge=1, description="torch intra-op threads of the service "
                               "process (torch.set_num_threads): the network is tiny, more "
                               "threads only contend for the cores (15x slower measured on 2 "
                               "busy cores)")
    learner_cpu_share: float = Field(0.5, gt=0.0, le=1.0, description="at most this share "
                                     "of one core for the learner's training thread "
                                     "(placement.service.cpu_budget): a service that shares "
                                     "a machine with the TaskManagers must not take their CPU "
                                     "(0.34-0.67 of 2 cores measured unbounded); past it, "
                                     "examples wait in the bounded queue; 1 = no limit")
    fallback: str = Field("least_loaded", description="placement.policies rule /decide uses "
                          "while no model version exists")

    @field_validator("initial_model", mode="before")
    @classmethod
    def _shipped_model(cls, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("shipped:"):
            from placement.ldwp.shipped import shipped_model
            name = value.removeprefix("shipped:")
            if name == "paper":
                raise ValueError("the shipped paper network has one output per node of the "
                                 "paper cluster; the service needs a size-agnostic model "
                                 "(shipped:residual or shipped:size_agnostic)")
            return shipped_model(name)
        return value

    @field_validator("gpu_model")
    @classmethod
    def _calibrated_gpu(cls, value: str) -> str:
        from workload.estimates import check_gpu_model
        return check_gpu_model(value)

    @field_validator("policy")
    @classmethod
    def _ldwp_only(cls, value: str) -> str:
        if value != "ldwp":
            raise ValueError(f"policy must be 'ldwp' (the only learned policy), got {value!r}")
        return value

    @field_validator("network")
    @classmethod
    def _node_scoring(cls, value: str) -> str:
        if value != "node_scoring":
            raise ValueError("network must be 'node_scoring': the paper network's size is fixed "
                             f"to one node count, and the service's nodes change; got {value!r}")
        return value

    @field_validator("reward")
    @classmethod
    def _latency_reward(cls, value: str) -> str:
        if value != "task_latency":
            raise ValueError("reward must be 'task_latency': feedback carries each task's "
                             f"latency, not the router's decision sequence; got {value!r}")
        return value

    @field_validator("learning")
    @classmethod
    def _no_overlap(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted({"network", "reward"} & set(value))
        if clash:
            raise ValueError(f"set {', '.join(clash)} at the top level of the service settings, "
                             "not inside learning")
        return value

    @model_validator(mode="after")
    def _wins_within_pairs(self) -> "ServiceSettings":
        if self.trial_min_wins > self.trial_pairs:
            raise ValueError(f"trial_min_wins ({self.trial_min_wins}) cannot exceed trial_pairs "
                             f"({self.trial_pairs})")
        return self

    def version_trial(self):
        """The learner's ``TrialSettings`` (placement.service.version_trial), None when
        ``trial_window_tasks`` is 0."""
        if self.trial_window_tasks == 0:
            return None
        from placement.service.version_trial import TrialSettings   # pydantic-only module
        confirm = self.trial_confirm_share if self.trial_confirm_share > self.trial_share \
            else 0.0
        return TrialSettings(window_tasks=self.trial_window_tasks, pairs=self.trial_pairs,
                             min_wins=self.trial_min_wins, share=self.trial_share,
                             confirm_share=confirm)

    def check_security(self) -> None:
        """Raise ValueError unless the host is loopback or a token is set. Checked when the
        service starts (not when the settings are built, so a token given by flag or
        environment after a config file chose the host still counts)."""
        if not is_loopback(self.host) and not self.token:
            raise ValueError(INSECURE_HOST_MESSAGE.format(host=self.host))

    def resolved_model_dir(self) -> Path:
        """``model_dir``, or ``<streamplace home>/models`` when unset."""
        if self.model_dir is not None:
            return Path(self.model_dir).expanduser().resolve()
        # Imported here: only this default needs the runtime home (workload, below us).
        from workload.cluster_spec import default_home
        return default_home() / "models"

    @property
    def url(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"
