"""The interleaved version trial: a candidate version decides a fixed share of the tasks beside
the champion, and serves for good only if its tasks drained faster than the champion's tasks of
the same period.

Why not windows (:mod:`placement.service.version_trial`, measured 2026-12-06 on the emulated
hosts, docs/results-engines.md "Is it the service or its learned versions?"): a window closes
after 200 of its
tasks are *judged*, and until then its version decides everything the routers decide. A backlog
of 6,000 records is decided in seconds, far ahead of the judgments, so the refused candidates'
windows lasted 84 s to 6.7 min and one candidate decided whole benchmark runs (0.58x to 0.79x of
what the prior made in the same round) before the trial refused it. A window bounds a
candidate's time, not its tasks. Here the exposure is bounded by construction: every router
holds both versions and decides a task with the candidate when a hash of the task's id falls
below ``share`` (:func:`in_candidate_share`), so a candidate decides ``share`` of the tasks,
however fast they come, and a task replayed after a failure goes to the same arm.

How the arms are compared: the trial reads each judged task's deciding version (the routers
stamp it); the candidate's version is one arm, the version the routers' champion decisions
carry (``champion_version``; -1 when the champion is no published version: the routers' own
fallback rule or starting model) the other. The trial runs in ``pairs`` **blocks**; a block is
closed once it holds ``window_tasks`` judged tasks of each arm, and its difference is the
candidate's mean ``log(1 + outcome s)`` minus the champion's. The champion's tasks count only
from the first judged task of the candidate on, so that tasks the champion decided before the
routers installed the candidate do not fall into the first block. The verdict is the windowed
trial's rule on the blocks: promoted when the candidate was cheaper in ``min_wins`` blocks and
on average, refused as soon as it can no longer win ``min_wins``; abandoned when the candidate
or the champion gets no judged task while ``stall_tasks`` others are judged (routers not on
the service's versions).

What it does not see: the two arms share the nodes, so each arm's tasks wait behind the
other's. With a small share the candidate's tasks are judged in a cluster the champion loads:
the trial asks whether the candidate's decision for a task is better *given* the champion's
load (a greedy placement's question), not what the cluster would do under the candidate alone.

The confirmation stage (``TrialSettings.confirm_share``, the service's 0.5): a candidate that
won at its share is not promoted yet. The service publishes a copy of it that decides the larger
``confirm_share`` of the tasks (:class:`TrialStage`; the routers hold it as they held the first),
and the trial starts again on the copy's tasks with the same blocks and rule; only a candidate
that wins both stages is promoted. Why (measured 2026-12-07 on the emulated hosts with headroom,
README): version 3 won 3 of 4 blocks at a tenth of the tasks, was promoted, and at full share
sent 40% of the records to the 0.35-core host (MCT 31%), then 71% to the host that also runs
the router and sinks: 302.8, then 271.6 records/s where the prior had made 355.1. What a
candidate's split does to a node's queue grows with its share: at a tenth its extra load on a
host is a tenth of the difference between the splits, and its tasks meet the champion's queues;
at a half, half of it, and its own tasks wait in the queues it builds. A canary's ramp: the
exposure of a bad candidate stays bounded by blocks (it is refused as soon as it cannot win).
The copy's tasks alone are the candidate's arm in the second stage (the first stage's tasks
still finishing count as neither arm).

Example::

    trial = InterleavedTrial(champion_bytes, TrialSettings(window_tasks=200, share=0.1))
    trial.start(candidate_version, candidate_bytes, champion_version=4)
    trial.observe(example.decided_by_version, example.latency_ms)    # per judged task
    step = trial.next_step()      # None, or the TrialVerdict
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from placement.service.version_trial import TrialSettings, TrialVerdict, VersionTrial
from workload.limits import MAX_MODEL_VERSION, short_repr

__all__ = ["InterleavedTrial", "in_candidate_share", "SHARE_RESOLUTION", "CandidateTrial",
           "candidate_trial", "NO_CHAMPION_VERSION", "TrialStage"]

#: how finely a task id's hash is cut into shares (its 8 bytes)
SHARE_RESOLUTION = 1 << 64
#: ``trial_champion`` when the champion is no published version (the router's own rule)
NO_CHAMPION_VERSION = -1


@dataclass(frozen=True)
class CandidateTrial:
    """What a candidate's service entry asks of the routers."""

    share: float              # the candidate's share of the tasks, in (0, 1)
    champion_version: int     # the rest: decided with this version (-1: the router's own rule)


@dataclass(frozen=True)
class TrialStage:
    """The candidate won its first stage: publish ``data`` again as a candidate deciding
    ``share`` of the tasks and tell the trial the copy's number
    (:meth:`InterleavedTrial.stage_published`)."""

    stage: int          # 1: the confirmation stage
    share: float
    data: bytes


def candidate_trial(entry: dict) -> CandidateTrial | None:
    """The interleaved trial a service entry asks for, or None for a version that serves
    alone (no ``trial_share``); read by the routers (:mod:`pyflink_jobs.model_trial`) and by
    ``/decide``, which serves the champion meanwhile. A malformed one raises ValueError: a
    router must not serve a version whose share or champion it cannot read (a share of NaN, 5
    or "all" would hand the candidate every task, or none)."""
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


def in_candidate_share(task_id: str, share: float) -> bool:
    """Whether the candidate decides ``task_id`` when it decides ``share`` of the tasks: an
    8-byte BLAKE2b of the id's UTF-8 below ``share`` of its range (deterministic across
    processes and restarts, unlike ``hash()``; about 0.5 µs). Why not CRC-32 (used until
    2026-12-07): it is linear, so ids that differ only in a counter fall unevenly: of
    ``task-0`` ... ``task-999`` it gave a tenth's candidate 6.7% and a half's 44%, of ``t0``
    ... ``t1999`` a half's 56%; a share that follows the ids' structure could also follow
    whatever the ids encode (a source, a type). BLAKE2b gave 9.8-11.4% and 49-50% on the same
    ids.

    >>> in_candidate_share("t1", 0.0), in_candidate_share("t1", 1.0)
    (False, True)
    """
    digest = hashlib.blake2b(task_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < share * SHARE_RESOLUTION


class InterleavedTrial(VersionTrial):
    """One candidate at a time against the champion, deciding side by side (module
    docstring). Same verdict, counters and settings as :class:`VersionTrial`; ``next_step``
    returns None or the verdict (there are no windows to publish)."""

    COMPARED = "blocks"

    def __init__(self, champion: bytes, settings: TrialSettings | None = None):
        super().__init__(champion, settings if settings is not None
                         else TrialSettings(share=0.1))
        if not self.settings.interleaved:
            raise ValueError("an interleaved trial needs a candidate share below 1 "
                             f"(TrialSettings.share), got {self.settings.share}")

    def _reset(self) -> None:
        super()._reset()
        self.champion_version: int | None = None
        # per block: [candidate cost sum, candidate tasks, champion cost sum, champion tasks]
        self._blocks: list[list[float]] = []
        self._candidate_judged = False
        # judged tasks since the champion's last one, from the candidate's first on: routers
        # that stamp their other decisions with another version must not keep the candidate
        # on trial (at its share) for ever
        self._champion_stalled = 0
        self._arm_version: int | None = None    # whose tasks are the candidate's arm now
        self._stage_reasons: list[str] = []      # the verdicts of the stages passed

    @property
    def stage(self) -> int:
        """0: the first stage; 1: the confirmation stage (one stage passed)."""
        return len(self._stage_reasons)

    @property
    def share(self) -> float:
        """The candidate's share of the tasks in the current stage."""
        return self.settings.confirm_share if self.stage else self.settings.share

    def start(self, version: int, data: bytes, champion_version: int = -1) -> None:
        """The candidate was published as ``version``; the routers' champion decisions carry
        ``champion_version`` (-1: no published version)."""
        super().start(version, data)
        self.champion_version = int(champion_version)
        if self.champion_version == self.candidate_version:
            raise ValueError(f"the champion and the candidate are both version {version}")
        self._arm_version = self.candidate_version
        self._new_blocks()

    def _new_blocks(self) -> None:
        self._blocks = [[0.0, 0, 0.0, 0] for _ in range(self.settings.pairs)]
        self._current = 0
        self._candidate_judged = False
        self._stalled = self._champion_stalled = 0

    def stage_published(self, version: int) -> None:
        """The copy :class:`TrialStage` asked for serves as ``version``: its tasks are the
        candidate's arm from now on, in new blocks."""
        version = int(version)
        if version in (self.champion_version, self._arm_version):
            raise ValueError(f"the confirmation copy cannot be version {version}: that is "
                             "the champion's or the first stage's")
        self._arm_version = version
        self._new_blocks()
        self._awaiting_version = False

    def observe(self, version: int | None, outcome_ms: float) -> None:
        """One judged task: decided by ``version`` (None: unknown), ``outcome_ms`` its judged
        outcome. Tasks of other versions only count towards a stall."""
        if not self.running:
            return
        valid = isinstance(outcome_ms, (int, float)) and not isinstance(outcome_ms, bool) \
            and math.isfinite(outcome_ms) and outcome_ms >= 0
        block = self._blocks[self._current]
        if valid and version == self._arm_version:
            block[0] += math.log1p(outcome_ms / 1000.0)
            block[1] += 1
            self._candidate_judged = True
            self._stalled = 0
            self._champion_stalled += 1
        elif valid and version == self.champion_version and self._candidate_judged:
            block[2] += math.log1p(outcome_ms / 1000.0)
            block[3] += 1
            self._stalled += 1
            self._champion_stalled = 0
        else:
            self._stalled += 1
            self._champion_stalled += self._candidate_judged

    def next_step(self) -> TrialStage | TrialVerdict | None:
        """Nothing yet (None), the confirmation stage to publish, or the verdict (the trial is
        over)."""
        if not self.running or self._awaiting_version:
            return None
        if self._stalled >= self.settings.stall_tasks:
            return self._end(False, f"abandoned: no task of candidate version "
                             f"{self._arm_version} among the last {self._stalled} judged "
                             "(routers not on the service's versions?)", abandoned=True)
        if self._champion_stalled >= self.settings.stall_tasks:
            return self._end(False, f"abandoned: no task of champion version "
                             f"{self.champion_version} among the last {self._champion_stalled} "
                             "judged (routers on another champion?)", abandoned=True)
        _, candidate_tasks, _, champion_tasks = self._blocks[self._current]
        if min(candidate_tasks, champion_tasks) < self.settings.window_tasks:
            return None
        differences = self._pair_differences()
        if self._current + 1 == len(self._blocks) or self._cannot_win(differences):
            return self._verdict(differences)
        self._current += 1
        return None

    def _verdict(self, differences: list[float]) -> TrialStage | TrialVerdict:
        """The stage's verdict: refused, promoted, or (a win of the first stage with a
        confirmation share) the confirmation stage."""
        promoted, reason, wins, mean_difference = self._judged(differences)
        reason = f"at a share of {self.share:g}, {reason}"
        if promoted and self.stage == 0 and self.settings.confirm_share:
            self._stage_reasons.append(reason)
            self._awaiting_version = True     # blocks start again in stage_published
            return TrialStage(self.stage, self.share, self.candidate)
        return self._end(promoted, "; then ".join([*self._stage_reasons, reason]), wins,
                         mean_difference)

    def _pair_differences(self) -> list[float]:
        """Candidate's minus champion's mean cost, per closed block (the current one is closed
        whenever this is asked: :meth:`next_step`)."""
        return [c_sum / c_n - h_sum / h_n
                for c_sum, c_n, h_sum, h_n in self._blocks[:self._current + 1]]

    def block_counts(self) -> list[tuple[int, int]]:
        """(candidate, champion) judged tasks per block so far, for /health and tests."""
        return [(int(b[1]), int(b[3])) for b in self._blocks]
