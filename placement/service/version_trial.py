"""The version trial: a learned model version serves the routers for good only after it beat
the version they used before, on the cluster itself.

Why (measured 2026-12-06 on the emulated hosts, docs/results-engines.md "On three emulated
hosts"): every
version the service published there passed the publish gate and the burst check, yet the
routers deciding with them made 0.82x the throughput of MCT at measured speeds, while the
untrained prior alone (MCT's completion estimate at the learned costs) made 1.12x. Both checks
ask the version's own model, or the measured drain rates under the prior's split, how it would
do; neither sees what its decisions do to the nodes. A model cannot be its own judge.

How: a candidate version that passed the gate and the burst check goes on trial against the
**champion** (what the routers used before it: at first the untrained prior). The service
serves them in ``pairs`` pairs of **windows**, candidate first in even pairs and champion
first in odd ones (candidate, champion, champion, candidate, candidate, ...), each window a
model version of its own, so every timing's ``routed_model_version`` says which window (and
arm) decided it. A window is closed
once ``window_tasks`` of its tasks have been judged (the learner's outcome of a task: its drain
time by default, :mod:`placement.service.drain_judge`); tasks a window's version decided after
the next window was published (routers refresh every few seconds) still count for their own
window. The cost of a task is ``log(1 + outcome s)``. Once the last window is closed:

- the candidate is **promoted** (it becomes the champion and serves) when its mean cost was
  lower than the champion's in at least ``min_wins`` of the ``pairs`` pairs and lower on
  average over the pairs;
- otherwise it is **refused**: the champion serves again (a copy of its file); as soon as
  it can no longer win ``min_wins`` pairs, without serving the windows left.

Windows alternate so that slow drift of the load falls on both arms, and the order within a
pair alternates too: with the candidate always first, a load that rises through a trial (a
burst filling the nodes) made the first window of every pair the cheaper one, and on the
emulated hosts the first candidate won all four pairs by 0.20 in log(1 + s) (2026-12-06).
A pair compares neighbouring windows. A trial whose current window gets no judged
task while ``stall_tasks`` tasks of other versions are judged (routers that do not follow the
service) is abandoned; the champion stays. Refusing is cheap to get wrong and promoting is not,
so ties and too little evidence keep the champion.

Example::

    trial = VersionTrial(champion_bytes, TrialSettings(window_tasks=200, pairs=4))
    trial.start(candidate_version, candidate_bytes)
    trial.observe(example.decided_by_version, example.latency_ms)    # per judged task
    step = trial.next_step()      # None, a TrialWindow to publish, or the TrialVerdict
    if isinstance(step, TrialWindow):
        trial.window_published(store.publish(...)["version"])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workload.limits import require_count

__all__ = ["TrialSettings", "TrialWindow", "TrialVerdict", "VersionTrial", "CANDIDATE",
           "CHAMPION", "window_arm"]

CANDIDATE, CHAMPION = "candidate", "champion"


@dataclass(frozen=True)
class TrialSettings:
    """How a candidate version is tried (module docstring).

    window_tasks: judged tasks that close one window; pairs: (candidate, champion) window
    pairs per trial; min_wins: pairs the candidate must win to be promoted; stall_tasks:
    judged tasks of other versions after which a trial whose window gets none is abandoned;
    share: below 1, the candidate decides only this share of the tasks, beside the champion,
    and each "window pair" is a block of the two arms' tasks judged in the same period
    (:mod:`placement.service.interleaved_trial`); 1, alternating windows (this module);
    confirm_share: for an interleaved trial, a candidate that won at ``share`` is tried again,
    deciding this larger share, before it is promoted (0: promoted at once; see
    :mod:`placement.service.interleaved_trial`, "The confirmation stage")."""

    window_tasks: int = 200
    pairs: int = 4
    min_wins: int = 3
    stall_tasks: int = 20_000
    share: float = 1.0
    confirm_share: float = 0.0

    def __post_init__(self):
        for name in ("window_tasks", "pairs", "min_wins", "stall_tasks"):
            require_count(name, getattr(self, name), minimum=1)
        if self.min_wins > self.pairs:
            raise ValueError(f"min_wins ({self.min_wins}) cannot exceed pairs ({self.pairs})")
        if not (isinstance(self.share, (int, float)) and not isinstance(self.share, bool)
                and 0.0 < self.share <= 1.0):   # NaN fails too
            raise ValueError(f"share must be a number in (0, 1], got {self.share!r}")
        confirm = self.confirm_share
        if not (isinstance(confirm, (int, float)) and not isinstance(confirm, bool)
                and (confirm == 0 or self.share < confirm < 1)):
            raise ValueError("confirm_share must be 0 (no confirmation stage) or a number "
                             f"between share ({self.share}) and 1, got {confirm!r}")

    @property
    def interleaved(self) -> bool:
        return self.share < 1.0


@dataclass(frozen=True)
class TrialWindow:
    """The next window: publish ``data`` (the ``arm``'s model file) as a new version and tell
    the trial its number (:meth:`VersionTrial.window_published`)."""

    arm: str
    index: int          # 0, 1, ...: window_arm(index) says whose
    data: bytes


@dataclass(frozen=True)
class TrialVerdict:
    """The end of a trial: ``promoted`` or not, why, and the evidence."""

    promoted: bool
    reason: str
    candidate_version: int
    wins: int = 0
    mean_difference: float | None = None     # candidate minus champion cost (log 1+s)
    data: bytes = b""                        # the model file that serves from now on


def window_arm(index: int) -> str:
    """Whose window ``index`` is: the candidate's first in even pairs, second in odd ones.

    >>> [window_arm(i)[:2] for i in range(8)]
    ['ca', 'ch', 'ch', 'ca', 'ca', 'ch', 'ch', 'ca']
    """
    first_in_pair = index % 2 == 0
    even_pair = (index // 2) % 2 == 0
    return CANDIDATE if first_in_pair == even_pair else CHAMPION


class VersionTrial:
    """One candidate at a time against the champion (module docstring)."""

    #: what the verdict's reason calls the units it compares
    COMPARED = "window pairs"

    def __init__(self, champion: bytes, settings: TrialSettings | None = None):
        self.settings = settings if settings is not None else TrialSettings()
        self.champion = champion
        self.candidate: bytes | None = None
        self.candidate_version: int | None = None
        self.trials = self.promoted = self.refused = self.abandoned = 0
        self._reset()

    def _reset(self) -> None:
        self._window_of: dict[int, int] = {}      # version -> window index
        self._sums: list[float] = []
        self._counts: list[int] = []
        self._current = -1
        self._stalled = 0
        self._awaiting_version = False

    @property
    def running(self) -> bool:
        return self.candidate is not None

    def start(self, version: int, data: bytes) -> None:
        """The candidate was published as ``version`` (its first window)."""
        if self.running:
            raise RuntimeError("a trial is already running")
        self._reset()
        self.candidate, self.candidate_version = data, int(version)
        windows = 2 * self.settings.pairs
        self._sums, self._counts = [0.0] * windows, [0] * windows
        self._current = 0
        self._window_of[int(version)] = 0
        self.trials += 1

    def observe(self, version: int | None, outcome_ms: float) -> None:
        """One judged task: decided by ``version`` (None or -1: unknown), ``outcome_ms`` its
        judged outcome. Tasks of versions outside the trial only count towards a stall."""
        if not self.running:
            return
        window = self._window_of.get(version) if isinstance(version, int) else None
        if window is None or not (isinstance(outcome_ms, (int, float)) and
                                  math.isfinite(outcome_ms) and outcome_ms >= 0):
            self._stalled += 1
            return
        self._sums[window] += math.log1p(outcome_ms / 1000.0)
        self._counts[window] += 1
        if window == self._current:
            self._stalled = 0

    def next_step(self) -> TrialWindow | TrialVerdict | None:
        """What the learner does now: nothing (None), publish the next window, or act on the
        verdict (the trial is over)."""
        if not self.running or self._awaiting_version:
            return None
        if self._stalled >= self.settings.stall_tasks:
            return self._end(False, f"abandoned: no task of window {self._current} among the "
                             f"last {self._stalled} judged (routers not on the service's "
                             "versions?)", abandoned=True)
        if self._counts[self._current] < self.settings.window_tasks:
            return None
        differences = self._pair_differences()
        if self._current + 1 == len(self._counts) or self._cannot_win(differences):
            return self._verdict(differences)
        self._current += 1
        self._stalled = 0
        self._awaiting_version = True
        arm = window_arm(self._current)
        return TrialWindow(arm, self._current, self.candidate if arm == CANDIDATE
                           else self.champion)

    def window_published(self, version: int) -> None:
        """The window :meth:`next_step` asked for is served as ``version``."""
        self._window_of[int(version)] = self._current
        self._awaiting_version = False

    def _pair_differences(self) -> list[float]:
        """Candidate's minus champion's mean cost, per window pair closed so far."""
        closed = self._current + 1 - (self._current + 1) % 2
        means = [s / c for s, c in zip(self._sums[:closed], self._counts[:closed])]
        return [(means[i] - means[i + 1]) if window_arm(i) == CANDIDATE
                else (means[i + 1] - means[i]) for i in range(0, closed, 2)]

    def _cannot_win(self, differences: list[float]) -> bool:
        """Whether the candidate can no longer win ``min_wins`` pairs. Why stop then: every
        candidate window is the cluster's time spent on a worse version (on the emulated hosts
        a refused candidate lost all four pairs by 0.32 in log(1 + s), 2026-12-06)."""
        left = self.settings.pairs - len(differences)
        return sum(d < 0 for d in differences) + left < self.settings.min_wins

    def _verdict(self, differences: list[float]) -> TrialVerdict:
        """Promote or refuse on ``differences`` (:meth:`_pair_differences`, asked once)."""
        promoted, reason, wins, mean_difference = self._judged(differences)
        return self._end(promoted, reason, wins, mean_difference)

    def _judged(self, differences: list[float]) -> tuple[bool, str, int, float]:
        """(promoted, why, wins, mean difference) on ``differences``: the verdict's rule."""
        wins = sum(d < 0 for d in differences)
        mean_difference = sum(differences) / len(differences)
        promoted = wins >= self.settings.min_wins and mean_difference < 0
        early = len(differences) < self.settings.pairs
        reason = (f"{'promoted' if promoted else 'refused'}: the candidate's cost was lower in "
                  f"{wins} of {len(differences)} {self.COMPARED} (needs "
                  f"{self.settings.min_wins} of {self.settings.pairs}"
                  f"{'; stopped: it could no longer win' if early else ''}), mean difference "
                  f"{mean_difference:+.4f} log(1+s)")
        return promoted, reason, wins, mean_difference

    def _end(self, promoted: bool, reason: str, wins: int = 0,
             mean_difference: float | None = None, abandoned: bool = False) -> TrialVerdict:
        verdict = TrialVerdict(promoted, reason, self.candidate_version, wins, mean_difference,
                               self.candidate if promoted else self.champion)
        if promoted:
            self.champion = self.candidate
            self.promoted += 1
        elif abandoned:
            self.abandoned += 1
        else:
            self.refused += 1
        self.candidate, self.candidate_version = None, None
        self._reset()
        return verdict
