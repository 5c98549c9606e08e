"""Does LDWP's learned correction add anything on top of MCT at measured drain rates?

    python -m benchmarks.ldwp_drain_prior

An experiment, not a shipped model. The residual LDWP's prior is MCT: a node's backlog over its
unit count (cores + GPUs), in the prior and in the network's completion column.
``benchmarks/mct_drain.py`` found that dividing by drain rates measured on one earlier run
(``benchmarks/results/mct_drain.json``, MCT+HEFT on tuning seed 501) beats both MCT and the
shipped LDWP on the paper setting. Here the residual is trained exactly as
``benchmarks/ship_models.py --models residual`` trains the shipped file (8 saturated
episodes on training seeds, a checkpoint every 2 episodes judged on the tuning seeds), with
the encoder's unit count replaced by those measured rates. LDWP has no setting for this yet,
so the script swaps ``ObservationEncoder.coefficients`` for the run; nothing in the package
changes. Checkpoint 0 is the prior alone, which is MCT at the measured rates.

Writes benchmarks/results/ldwp_drain_prior.json (the trained file stays in a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks._common import RESULTS, description, write_result


def measured_rates() -> dict[str, float]:
    source = RESULTS / "mct_drain.json"
    if not source.exists():
        raise SystemExit(f"{source} is missing: run python -m benchmarks.mct_drain first")
    return json.loads(source.read_text())["measured_rates"]["rates"]


def use_rates_as_units(rates: dict[str, float]) -> None:
    """Make every LDWP encoder built from now on divide backlogs by ``rates`` (per node id)."""
    from placement.ldwp import encoding
    original = encoding.ObservationEncoder.coefficients

    def coefficients(self):
        table = original(self)
        for node, (per_type, units) in list(table.items()):
            if node in rates and not isinstance(units, float):
                table[node] = (per_type, float(rates[node]))
        return table

    encoding.ObservationEncoder.coefficients = coefficients


def main(argv=None) -> None:
    # no options: the parser is there so that --help explains instead of running (10 min)
    argparse.ArgumentParser(description=description(__doc__)).parse_args(argv)
    from benchmarks.ship_models import ship
    rates = measured_rates()
    use_rates_as_units(rates)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ldwp-drain-prior-") as tmp:
        report = ship("residual", out=Path(tmp) / "residual_drain_prior.spm")
    tuning = report.get("tuning_throughput_per_min", [])
    path = write_result("ldwp_drain_prior", {
        "rates": rates, "rates_from": "benchmarks/results/mct_drain.json (measured_rates)",
        "training": "benchmarks.ship_models --models residual, units replaced by the rates",
        "checkpoint_tuning_throughput_per_min": tuning,
        "checkpoint_0": "the prior alone: MCT at the measured drain rates",
        "chosen_episode": report.get("chosen_episode"),
        "model_sha256": report.get("sha256"),
        "wall_s": time.perf_counter() - started})
    print(f"checkpoints on the tuning seeds: {[round(t, 1) for t in tuning]} tasks/min "
          f"(first: the prior alone); chosen episode {report.get('chosen_episode')}; {path}")


if __name__ == "__main__":
    main()
