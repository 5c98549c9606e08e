"""The online learner's learning curve, read back from a placement service's model store.

Every version the service publishes records how many feedback records it was trained on, its
training loss and its error on the held-back examples the publish gate keeps
(:mod:`placement.service.model_gate`); a version the gate refused is never published (the
router keeps the last good one). This module turns a store's index into one row per version and
a plot, and says how much the placement moved between the LDWP runs of a benchmark: the
"does not oscillate" check of issue 13, item 4.

    python -m benchmarks.learning_curve MODEL_DIR [--runs flink_e2e_hosts.json] [--out NAME]

``benchmarks.flink_e2e`` calls :func:`learning_curve` on its service's store and writes the rows
under ``"learning_curve"`` in its JSON, with :func:`placement_drift` of its LDWP runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks._common import RESULTS, write_result

__all__ = ["learning_curve", "placement_drift", "plot", "LDWP_VARIANT"]

#: the benchmark variant whose runs use the service's models
LDWP_VARIANT = "streamplace (LDWP + IAWP)"
#: what each curve row keeps of a version's metadata
FIELDS = ("version", "trained_on_records", "new_records", "training_steps", "loss",
          "held_back_error", "gate", "created_at_ms")


def learning_curve(model_dir: str | Path) -> list[dict]:
    """One row per kept version of the store in ``model_dir``, oldest first (empty when the
    folder holds no store). Reads the index only: no model file is loaded."""
    from placement.service.store import ModelStore
    if not Path(model_dir, "index.json").exists():
        return []
    return [{k: meta.get(k) for k in FIELDS} for meta in ModelStore(model_dir).versions()]


def placement_drift(runs: list[dict], variant: str = LDWP_VARIANT) -> dict:
    """How far apart the per-node shares of ``variant``'s runs are, in run order: for each
    consecutive pair, half the L1 distance between their share vectors (0: the same split,
    1: disjoint nodes), and the model version each run's routers ended on.

    >>> placement_drift([{"variant": "v", "per_node": {"a": 3, "b": 1}},
    ...                  {"variant": "v", "per_node": {"a": 1, "b": 3}}], "v")["max_shift"]
    0.5
    """
    shares, versions = [], []
    for row in runs:
        if row.get("variant") != variant:
            continue
        counts = row.get("per_node") or {}
        total = sum(counts.values()) or 1
        shares.append({n: c / total for n, c in counts.items()})
        versions.append((row.get("router") or {}).get("streamplace_model_version"))
    shifts = []
    for before, after in zip(shares, shares[1:]):
        nodes = set(before) | set(after)
        shifts.append(0.5 * sum(abs(before.get(n, 0.0) - after.get(n, 0.0)) for n in nodes))
    return {"shares": shares, "model_versions": versions, "shifts": shifts,
            "max_shift": max(shifts) if shifts else None}


def plot(curve: list[dict], drift: dict | None, path: Path) -> None:
    """Held-back error and training loss per version; the LDWP runs' node shares in order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = 2 if drift and drift["shares"] else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    records = [row["trained_on_records"] for row in curve]
    for key, label, style in (("held_back_error", "held-back error (gate)", "o-"),
                              ("loss", "training loss", "x--")):
        ax.plot(records, [row[key] for row in curve], style, label=label)
    ax.set_xlabel("feedback records trained on")
    ax.set_yscale("log")
    ax.set_title(f"Online LDWP: {len(curve)} published versions")
    ax.legend()
    if panels == 2:
        ax = axes[0][1]
        nodes = sorted({n for share in drift["shares"] for n in share})
        bottom = [0.0] * len(drift["shares"])
        for node in nodes:
            values = [share.get(node, 0.0) for share in drift["shares"]]
            ax.bar(range(1, len(values) + 1), values, bottom=bottom, label=node)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xticks(range(1, len(bottom) + 1))
        ax.set_xlabel("LDWP run, in order")
        ax.set_ylabel("share of tasks")
        shift = drift["max_shift"]
        ax.set_title("Where LDWP sent the tasks" +
                     (f" (largest shift between runs {shift:.2f})" if shift is not None else ""))
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="a placement service's model_dir")
    parser.add_argument("--runs", help="a benchmarks/results JSON whose 'runs' to read drift from")
    parser.add_argument("--out", default="learning_curve", help="result name (JSON + PNG)")
    args = parser.parse_args(argv)
    curve = learning_curve(args.model_dir)
    if not curve:
        parser.error(f"{args.model_dir} holds no model store (no index.json)")
    drift = None
    if args.runs:
        drift = placement_drift(json.loads(Path(args.runs).read_text()).get("runs") or [])
    path = write_result(args.out, {"model_dir": str(args.model_dir), "learning_curve": curve,
                                   "placement_drift": drift})
    plot(curve, drift, RESULTS / f"{args.out}.png")
    print(f"wrote {path}: {len(curve)} versions")


if __name__ == "__main__":
    main()
