"""A router's side of the placement service's interleaved version trial
(:mod:`placement.service.interleaved_trial`, which also reads what an entry asks:
``candidate_trial``): the candidate version a router holds beside its champion.

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
from dataclasses import dataclass

from placement.service.interleaved_trial import in_candidate_share
from workload.limits import MAX_MODEL_VERSION, short_repr
from workload.model import Policy

__all__ = ["CandidateArm", "ServedModels", "plausible_version"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CandidateArm:
    """The candidate a router holds beside its champion, and its share of the tasks."""

    policy: Policy
    version: int
    share: float

    def decides(self, task_id: str) -> bool:
        return in_candidate_share(task_id, self.share)


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

