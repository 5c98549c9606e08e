"""A router's side of the placement service's interleaved version trial
(:mod:`placement.service.interleaved_trial`): the candidate version it holds beside its champion,
and what a service entry must say for the router to serve one.

While the service's newest version is a candidate on an interleaved trial, its entry says
``trial_share`` (the candidate's share of the tasks, in (0, 1)) and ``trial_champion`` (the
version the rest of the tasks are decided with; -1: whatever the router decides with when it has
no service version). The router then decides a task with the candidate when the task id's hash
falls in that share (:func:`placement.service.interleaved_trial.in_candidate_share`, the same
rule in every router and after a restart) and stamps the deciding version, so the trial can tell
the arms apart. The next version the service publishes (the verdict's copy) ends it.

Example::

    trial = candidate_trial(latest_entry)       # None for a plain version; raises if malformed
    arm = CandidateArm(policy, latest_entry["version"], trial.share)
    arm.decides("task-17")                      # True for about share of the task ids
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from placement.service.interleaved_trial import in_candidate_share
from workload.limits import MAX_MODEL_VERSION, short_repr
from workload.model import Policy

__all__ = ["CandidateArm", "CandidateTrial", "ServedModels", "candidate_trial",
           "plausible_version", "NO_CHAMPION_VERSION"]

log = logging.getLogger(__name__)

#: ``trial_champion`` when the champion is no published version (the router's own rule)
NO_CHAMPION_VERSION = -1


@dataclass(frozen=True)
class CandidateTrial:
    """What a candidate's service entry asks of the routers."""

    share: float              # the candidate's share of the tasks, in (0, 1)
    champion_version: int     # the rest: decided with this version (-1: the router's own rule)


@dataclass(frozen=True)
class CandidateArm:
    """The candidate a router holds beside its champion, and its share of the tasks."""

    policy: Policy
    version: int
    share: float

    def decides(self, task_id: str) -> bool:
        return in_candidate_share(task_id, self.share)


def candidate_trial(entry: dict) -> CandidateTrial | None:
    """The interleaved trial a service entry asks for, or None for a version that serves
    alone (no ``trial_share``). A malformed one raises ValueError: the router must not serve a
    version whose share or champion it cannot read (a share of NaN, 5 or "all" would hand the
    candidate every task, or none)."""
    if not isinstance(entry, dict) or "trial_share" not in entry:
        return None
    share, champion = entry.get("trial_share"), entry.get("trial_champion")
    if not (isinstance(share, (int, float)) and not isinstance(share, bool)
            and math.isfinite(share) and 0.0 < share < 1.0):
        raise ValueError(f"trial_share must be a number in (0, 1), got {short_repr(share)}")
    if not (isinstance(champion, int) and not isinstance(champion, bool)
            and NO_CHAMPION_VERSION <= champion <= MAX_MODEL_VERSION):
        raise ValueError(f"trial_champion must be an int in [{NO_CHAMPION_VERSION}, "
                         f"{MAX_MODEL_VERSION}], got {short_repr(champion)}")
    if champion == entry.get("version"):
        raise ValueError(f"trial_champion is the candidate itself (version {champion})")
    return CandidateTrial(float(share), champion)


def plausible_version(version) -> bool:
    """Whether ``version`` could be a service's model version (an int in [0, 2**53])."""
    return isinstance(version, int) and not isinstance(version, bool) and \
        0 <= version <= MAX_MODEL_VERSION


class ServedModels:
    """The router's models from the placement service: the one it decides with
    (``model_policy``, ``model_version``) and a ``candidate`` on trial beside it. Mixed into
    :class:`pyflink_jobs.router.Router`, which owns ``cluster``, ``costs`` and ``_lock``."""

    def _load_policy(self, data: bytes):
        from placement.ldwp.inference import NumpyLDWPPolicy
        previous = self.model_policy
        # a model for other nodes (a paper layout) is refused here by the loader, which is
        # given this router's cluster: else every decision would be the fallback's
        return NumpyLDWPPolicy.from_bytes(
            data, self.cluster, costs=self.costs,
            coefficients=previous.coefficients if previous else None)

    def install_model(self, data: bytes, version: int | None = None) -> None:
        """Swap in a model file (bytes); raises ModelFileError for a bad one (old model kept).
        Ends a version trial: the model decides every task."""
        policy = self._load_policy(data)
        version = version if version is not None else policy.version
        if not plausible_version(version):
            # a file's own metadata may say anything: a version the service never gives
            # ("abc", NaN, 1e300) would stop every later one from looking newer
            log.warning("model file version %s is not an int in [0, %d]: installed as "
                        "unversioned", short_repr(version), MAX_MODEL_VERSION)
            version = None
        with self._lock:
            self.model_policy = policy
            self.model_version = version
            self.candidate = None

    def install_candidate(self, data: bytes, version: int, share: float) -> None:
        """Decide ``share`` of the tasks (by task id, :mod:`pyflink_jobs.model_trial`) with
        the model file ``data``, the service's candidate ``version``, beside the installed
        model; raises ModelFileError for a bad file (nothing changes)."""
        if not plausible_version(version) or not 0.0 < share < 1.0:
            raise ValueError(f"a candidate needs a version in [0, {MAX_MODEL_VERSION}] and a "
                             f"share in (0, 1), got {short_repr(version)}, {short_repr(share)}")
        arm = CandidateArm(self._load_policy(data), version, share)
        with self._lock:
            self.candidate = arm

