"""Pairs of stages that failed to launch together on a GPU model: held apart for a while.

The paper's IAWP (``IawpScheduler``, cosine rule) ranks co-runners by profile similarity and
gates launches on predicted GPU memory only, so a pair the GPU cannot hold (a launch that ran
out of device memory, or one of Gavel's measured "cannot co-run" pairs in the simulator) was
launched again at every scheduling instant: on the paper cluster, 2,081 failed launches for
1,500 tasks on tuning seed 501 (face detection next to face encoding on the K80s), each
delaying a stage by the retry interval. The executor reports such a failure as rate 0
(``observe_corun``); this table remembers it::

    first failure of (stage, partner, GPU model)      held apart for FIRST_HOLD_S
    each further failure after the hold ran out       the hold doubles, at most MAX_HOLD_S
    a co-run of the two measured with a rate > 0      forgotten (the pair fits after all)

Why a hold that expires and not "never again": one false failure report (a transient
out-of-memory next to a third process, a hostile record) must not keep two stages apart for
good; at most it costs one hold of co-running. Both orders of a pair are held (A failed next to
B: B next to A shares the same memory). The table is bounded (``MAX_PAIRS``, oldest dropped).

Example::

    >>> pairs = FailedPairs()
    >>> pairs.failed("a", "b", "K80", now_s=10.0)
    >>> pairs.held("b", ["a"], "K80", now_s=20.0), pairs.held("b", ["a"], "K80", now_s=41.0)
    (True, False)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["FailedPairs", "FIRST_HOLD_S", "MAX_HOLD_S", "MAX_PAIRS"]

#: seconds a pair is held apart after its first failed launch (about a few stages' run time)
FIRST_HOLD_S = 30.0
#: longest hold (a pair that keeps failing is re-tried this often)
MAX_HOLD_S = 600.0
#: most pairs remembered
MAX_PAIRS = 1024


class FailedPairs:
    """(stage, partner, GPU model) -> (held until, current hold), bounded, both orders."""

    def __init__(self, first_hold_s: float = FIRST_HOLD_S, max_hold_s: float = MAX_HOLD_S,
                 max_pairs: int = MAX_PAIRS) -> None:
        if not (math.isfinite(first_hold_s) and 0 < first_hold_s <= max_hold_s
                and math.isfinite(max_hold_s)):
            raise ValueError(f"holds must be finite with 0 < first_hold_s <= max_hold_s, got "
                             f"{first_hold_s!r}, {max_hold_s!r}")
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be at least 1, got {max_pairs!r}")
        self.first_hold_s, self.max_hold_s, self.max_pairs = first_hold_s, max_hold_s, max_pairs
        self._pairs: OrderedDict[tuple[str, str, str], tuple[float, float]] = OrderedDict()

    @staticmethod
    def _key(stage: str, partner: str, gpu_model: str) -> tuple[str, str, str]:
        low, high = sorted((stage, partner))
        return low, high, gpu_model

    def failed(self, stage: str, partner: str, gpu_model: str, now_s: float) -> None:
        """``stage`` failed to launch next to ``partner`` on a ``gpu_model`` GPU at ``now_s``."""
        if not math.isfinite(now_s):
            return
        key = self._key(stage, partner, gpu_model)
        until, hold = self._pairs.pop(key, (-math.inf, 0.0))
        if now_s < until:           # failed again inside its hold (launched before it was
            self._pairs[key] = (until, hold)   # known): the same hold, not a doubling
            return
        hold = self.first_hold_s if hold == 0.0 else min(self.max_hold_s, 2.0 * hold)
        self._pairs[key] = (now_s + hold, hold)
        while len(self._pairs) > self.max_pairs:
            self._pairs.popitem(last=False)

    def succeeded(self, stage: str, partner: str, gpu_model: str) -> None:
        """The two ran side by side (a measured rate > 0): they fit, forget the failures."""
        self._pairs.pop(self._key(stage, partner, gpu_model), None)

    def held(self, stage: str, partners: Iterable[str], gpu_model: str, now_s: float) -> bool:
        """Whether ``stage`` must not start next to any of ``partners`` now."""
        if not self._pairs:
            return False
        return any(self._pairs.get(self._key(stage, p, gpu_model), (-math.inf,))[0] > now_s
                   for p in partners)

    def __len__(self) -> int:
        return len(self._pairs)
