"""What the service serves while it tries versions: the :class:`VersionTrial` (the rule) wired to
the model store (the versions routers download).

The learner hands over every candidate that passed its gate and burst check (:meth:`start`,
after publishing it: the candidate's first window) and every judged task (:meth:`observe`);
this publishes each later window as a new version (a copy of the candidate's or the champion's
model file), and after the verdict makes the champion serve: the promoted candidate's copy, or
nothing new when the champion's window is the one serving. After a refusal the next candidate
waits longer (:attr:`wait_factor`: ``publish_every`` times 2, 4, then 8), so a learner that keeps
producing worse versions spends less and less of the cluster's time on them; a promotion
resets it.

With ``TrialSettings.share`` below 1 the trial is interleaved
(:mod:`placement.service.interleaved_trial`): the candidate's entry also says ``trial_share``
and ``trial_champion`` (the version the routers' champion decisions carry, -1 for none), the
routers decide that share of their tasks with it and the rest with the champion. A candidate
that wins at that share is published again, as a copy that decides ``confirm_share`` of the
tasks (``trial_stage`` 1, the confirmation stage), and nothing else is published until the
verdict (a copy of the winner, which ends the trial in every router).

Every copy's metadata says what it is (``trial_arm``, ``trial_window``, ``trial_of``: the
candidate's version, ``copy_of``: the version whose weights it carries, or null for the prior)
and keeps the original's ``trained_on_records``. A service restarted mid-trial starts no trial
from the stored candidate: it serves a copy of the newest version that was not a candidate
(:func:`champion_of_store`).

Example::

    serving = TrialServing(store, champion_bytes, TrialSettings())
    serving.start(entry, store.read_bytes(entry["version"]))   # the candidate, published
    serving.observe(example)          # per judged task; publishes windows and the verdict
"""

from __future__ import annotations

import logging

from placement.service.interleaved_trial import InterleavedTrial, TrialStage
from placement.service.store import ModelStore
from placement.service.version_trial import (CANDIDATE, CHAMPION, TrialSettings,
                                             TrialVerdict, TrialWindow, VersionTrial)

__all__ = ["TrialServing", "champion_of_store", "trial_serving_for", "backed_off",
           "MAX_WAIT_FACTOR"]

log = logging.getLogger(__name__)

#: The longest a learner waits for its next candidate after refusals, in ``publish_every``s.
MAX_WAIT_FACTOR = 8

#: What a copy keeps of its original's metadata.
_KEPT = ("trained_on_records", "training_data_hash", "nodes", "cluster_fingerprint",
         "policy", "network", "reward")


def backed_off(wait_factor: int) -> int:
    """The wait after one more refusal in a row: twice ``wait_factor``, at most
    :data:`MAX_WAIT_FACTOR` (the trial's refused candidates and the learner's refused checks).

    >>> [backed_off(w) for w in (1, 2, 4, 8)]
    [2, 4, 8, 8]
    """
    return min(MAX_WAIT_FACTOR, 2 * wait_factor)


def champion_of_store(store: ModelStore) -> tuple[dict | None, bool]:
    """(newest stored version that was not a trial's candidate or None, whether the newest
    version is a candidate: a trial a restart interrupted)."""
    versions = store.versions()
    interrupted = bool(versions) and versions[-1].get("trial_arm") == CANDIDATE
    for entry in reversed(versions):
        if entry.get("trial_arm") != CANDIDATE:
            return entry, interrupted
    return None, interrupted


def trial_serving_for(store: ModelStore, settings: TrialSettings, starting_file,
                      metrics=None) -> "TrialServing":
    """A learner's TrialServing. The champion: the newest stored version that was no
    candidate (a resumed store's, or the prior or initial model the learner published as
    version 1); for an empty store ``starting_file()`` (the bytes of the learner's starting
    weights). A restart in the middle of a trial serves the champion again."""
    entry, interrupted = champion_of_store(store)   # (None, False) for an empty store
    data = store.read_bytes(entry["version"]) if entry is not None else starting_file()
    serving = TrialServing(store, data, settings, entry, metrics)
    if interrupted:
        serving.serve_champion("a restart interrupted the trial of version "
                               f"{store.latest()['version']}")
    return serving


class TrialServing:
    """The version trial on a model store (module docstring). ``champion``: the model file the
    routers use now (the prior's when nothing was published), ``champion_entry`` its stored
    metadata (None for the prior)."""

    def __init__(self, store: ModelStore, champion: bytes, settings: TrialSettings | None = None,
                 champion_entry: dict | None = None, metrics=None):
        self.store = store
        interleaved = settings is not None and settings.interleaved
        self.trial = (InterleavedTrial if interleaved else VersionTrial)(champion, settings)
        self.metrics = metrics
        self.champion_entry = dict(champion_entry) if champion_entry else None
        # the version the routers' champion decisions carry: the newest one it was served as
        # (its copies have numbers of their own); -1 while it is no published version
        self.champion_version = -1 if champion_entry is None else int(champion_entry["version"])
        self.candidate_entry: dict | None = None
        self.serving = CHAMPION
        self.wait_factor = 1
        self.last_verdict: TrialVerdict | None = None

    @property
    def running(self) -> bool:
        return self.trial.running

    def serve_champion(self, reason: str) -> dict:
        """Publish a copy of the champion now (a restart interrupted a trial)."""
        return self._publish(self.trial.champion, CHAMPION, self.champion_entry,
                             {"trial_verdict": reason})

    def candidate_metadata(self) -> dict:
        """What a candidate's entry must say for the routers to serve it on trial: its arm and
        first window, and for an interleaved trial its share and the champion's version."""
        meta = {"trial_arm": CANDIDATE, "trial_window": 0}
        if isinstance(self.trial, InterleavedTrial):
            meta.update(trial_share=self.trial.share, trial_champion=self.champion_version)
        return meta

    def start(self, entry: dict, data: bytes) -> None:
        """The candidate ``data`` was published as ``entry`` (its first window), with
        :meth:`candidate_metadata`."""
        if isinstance(self.trial, InterleavedTrial):
            self.trial.start(entry["version"], data, self.champion_version)
        else:
            self.trial.start(entry["version"], data)
        self.candidate_entry = dict(entry)
        self.serving = CANDIDATE
        log.info("model version %d on trial against %s", entry["version"],
                 self._name(self.champion_entry))

    def observe(self, example) -> TrialVerdict | None:
        """One judged task (a TrainingExample); publishes the next window or acts on the
        verdict when one falls due, and returns the verdict then."""
        if not self.trial.running:
            return None
        self.trial.observe(example.decided_by_version, example.latency_ms)
        step = self.trial.next_step()
        if isinstance(step, TrialWindow):
            original = self.candidate_entry if step.arm == CANDIDATE else self.champion_entry
            entry = self._publish(step.data, step.arm, original, {"trial_window": step.index})
            self.trial.window_published(entry["version"])
        elif isinstance(step, TrialStage):
            entry = self._publish(step.data, CANDIDATE, self.candidate_entry,
                                  {**self.candidate_metadata(), "trial_stage": step.stage})
            self.trial.stage_published(entry["version"])
            log.info("model version %d won at a share of %g; confirming at %g as version %d",
                     self.candidate_entry["version"], self.trial.settings.share, step.share,
                     entry["version"])
        elif isinstance(step, TrialVerdict):
            self._conclude(step)
            return step
        return None

    def _conclude(self, verdict: TrialVerdict) -> None:
        self.last_verdict = verdict
        log.info("model version %d: %s", verdict.candidate_version, verdict.reason)
        if verdict.promoted:
            self.champion_entry = self.candidate_entry
            self.wait_factor = 1
        else:
            self.wait_factor = backed_off(self.wait_factor)
        if verdict.promoted or self.serving != CHAMPION:
            self._publish(verdict.data, CHAMPION, self.champion_entry,
                          {"trial_verdict": verdict.reason})
        self.candidate_entry = None

    def _publish(self, data: bytes, arm: str, original: dict | None, extra: dict) -> dict:
        meta = {"trained_on_records": 0, "training_data_hash": "", "new_records": 0,
                **{k: original[k] for k in _KEPT if original and k in original}}
        meta.update(trial_arm=arm, copy_of=None if original is None else original["version"],
                    trial_of=None if self.candidate_entry is None
                    else self.candidate_entry["version"])
        meta.update(extra)
        entry = self.store.publish_bytes(data, meta)
        self.serving = arm
        if arm == CHAMPION:
            self.champion_version = int(entry["version"])
        if self.metrics is not None:
            self.metrics.model_version.set(entry["version"])
        return entry

    @staticmethod
    def _name(entry: dict | None) -> str:
        return "the prior" if entry is None else f"version {entry['version']}"

    def stats(self) -> dict:
        """Counts and the last verdict, for /health and the benchmarks."""
        trial = self.trial
        return {"trials": trial.trials, "promoted": trial.promoted, "refused": trial.refused,
                "abandoned": trial.abandoned, "running": trial.running,
                "serving": self.serving, "share": trial.settings.share,
                **({"confirm_share": trial.settings.confirm_share, "stage": trial.stage}
                   if isinstance(trial, InterleavedTrial) else {}),
                "champion_serving_version": self.champion_version,
                **({"block_tasks": trial.block_counts()}
                   if isinstance(trial, InterleavedTrial) and trial.running else {}),
                "champion_version": None if self.champion_entry is None
                else self.champion_entry["version"],
                "last_verdict": None if self.last_verdict is None else self.last_verdict.reason}
