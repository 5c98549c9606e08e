"""How many bytes a stage hands to its consumers: the data the cross-node stage placement axis
moves between nodes when a policy splits a task (``Decision.stage_nodes``).

Read from ``stage_output:`` in ``workload/calibration.yaml``: a stage's fraction of the task's
input bytes comes from ``measured`` when a profile has measured it, else from
``assumed_fraction`` (its own entry, else ``default``). Both the simulator (what really moves)
and the partitioning policies (what they estimate) read the same numbers.

Example::

    >>> from workload.estimates import load_calibration
    >>> fractions = stage_output_fractions(load_calibration())
    >>> fractions["gaussian_pyramid"], fractions["face_encoding"]
    (5.33, 0.001)
    >>> stage_output_bytes(fractions, "face_landmarks", 2_000_000)
    200000.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from workload.catalog import STAGE_TYPES

__all__ = ["stage_output_fractions", "stage_output_bytes"]


def _fraction(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"calibration stage_output.{where} must be a finite number >= 0, "
                         f"got {value!r}")
    return float(value)


def stage_output_fractions(calibration) -> dict[str, float]:
    """Every stage type's output as a fraction of its task's input bytes (measured first, then
    assumed, then the assumed default); ``calibration`` is a ``workload.estimates.Calibration``
    (or its ``raw`` mapping). Bad or missing entries raise ValueError naming them."""
    raw = getattr(calibration, "raw", calibration)
    section = raw.get("stage_output") if isinstance(raw, Mapping) else None
    if not isinstance(section, Mapping):
        raise ValueError("calibration has no stage_output section (the bytes a stage hands to "
                         "its consumers); see workload/calibration.yaml")
    measured = section.get("measured") or {}
    assumed = section.get("assumed_fraction") or {}
    if not isinstance(measured, Mapping) or not isinstance(assumed, Mapping):
        raise ValueError("calibration stage_output.measured and .assumed_fraction must be "
                         "mappings of stage -> fraction")
    if "default" not in assumed:
        raise ValueError("calibration stage_output.assumed_fraction needs a default")
    default = _fraction(assumed["default"], "assumed_fraction.default")
    out = {}
    for stage in STAGE_TYPES:
        if stage in measured:
            out[stage] = _fraction(measured[stage], f"measured.{stage}")
        else:
            out[stage] = _fraction(assumed.get(stage, default), f"assumed_fraction.{stage}")
    return out


def stage_output_bytes(fractions: Mapping[str, float], stage: str, input_bytes: float) -> float:
    """Bytes ``stage`` hands on for a task of ``input_bytes`` (its fraction times the input)."""
    return fractions[stage] * float(input_bytes)
