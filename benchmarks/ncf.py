"""Interference prediction on real Gavel measurements: per-job mean, MF, the paper's NCF, NeuMF.

For each GPU type (k80, p100, v100) the matrix is Gavel's measured co-location throughput of the
26 scale-1 job types: entry (job, partner) = the job's throughput while sharing the GPU with the
partner, divided by its throughput alone ("normalised throughput", in [0, 1]); (0, 0) pairs
cannot co-run ("infeasible").

    python -m benchmarks.ncf [--quick] [--first-seed 0]

Experiments (every one repeated over random masks; mean and 95% Student-t interval over masks):

- **random masks**: keep 10%, 20%, 40% of the entries observed. A mask is drawn over unordered
  pairs {job, partner} (the diagonal included): one co-location experiment measures both jobs'
  rates, so observing pair {a, b} reveals entries (a, b) and (b, a). The throughput models are
  fitted on the observed FEASIBLE entries; MAE and Spearman rank correlation are scored on the
  feasible held-out entries. Infeasibility is scored separately as a classification: the same
  model class is fitted on the observed "cannot co-run" indicator (1 = infeasible) and its
  prediction is the score (``auc``); ``auc_from_throughput`` instead scores 1 - the predicted
  throughput of the throughput model (which never saw an infeasible pair).
- **unseen jobs**: 20% of the jobs (rows and columns) are new; the pairs among known jobs are
  all observed (pre-training on a profiled catalogue), each new job has k co-location
  measurements with random known partners (k = 2: the paper's sparse profiling). ``refit``
  fits on everything at once; ``online`` pre-trains on the known jobs, then feeds each new job's
  measurements to ``online_update`` (the paper's flow: plain SGD after Adam pre-training).
  Scored on every unobserved entry that involves a new job.
- **transfer**: K80 and P100 fully observed, V100 with 10% observed (same pair masks), scored on
  V100's held-out entries. ``stack_rows``: rows are (GPU type, job), columns the partners (partner
  embeddings shared across types); ``stack_columns``: rows are jobs, columns (GPU type, partner)
  (job embeddings shared across types: a job's K80/P100 behaviour informs its V100 row);
  ``v100_only``: the same V100 mask without the other types.

Hyperparameters were chosen on masks of seeds 100-104 (``--first-seed 100``); the reported masks
use seeds 0-4 (``--quick``: 0-1), never used for tuning.

Writes benchmarks/results/ncf.json (``ncf-quick.json``) and ncf.png (``ncf-quick.png``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import asdict

import numpy as np

from benchmarks._common import RESULTS, write_result

MODELS = ("per_job_mean", "matrix_factorization", "paper_ncf", "neumf")
GPU_TYPES = ("k80", "p100", "v100")
FRACTIONS = (0.1, 0.2, 0.4)
GOAL_MAE = 0.05          # the goal at 20% observed
NEW_JOB_SHARE = 0.2      # unseen-job split: share of jobs held out as new
UNSEEN_K = (2, 4)        # co-location measurements per new job
TRANSFER_FRACTION = 0.1  # V100 observed in the transfer experiment


# --------------------------------------------------------------------------- data
def gavel_matrix(table, gpu_type: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(job names, normalised throughput matrix, feasible matrix) of the scale-1 jobs."""
    jobs = [j for j in table.jobs(gpu_type) if j.scale == 1]
    throughput = np.array([[table.normalized(a, b, gpu_type)[0] for b in jobs] for a in jobs])
    feasible = np.array([[table.feasible(a, b, gpu_type) for b in jobs] for a in jobs])
    return [j.model for j in jobs], throughput, feasible


def pair_mask(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric observed mask: ``fraction`` of the unordered pairs {a, b} (diagonal included)."""
    upper = np.array(np.triu_indices(n)).T
    chosen = upper[rng.choice(len(upper), size=max(1, round(fraction * len(upper))),
                              replace=False)]
    mask = np.zeros((n, n), dtype=bool)
    mask[chosen[:, 0], chosen[:, 1]] = True
    mask[chosen[:, 1], chosen[:, 0]] = True
    return mask


# --------------------------------------------------------------------------- models + scores
def make_model(name: str, quick: bool):
    from interference.ncf import make_completion_model

    # --quick: fewer Adam steps (same learning rates), so the smoke run is fast
    return make_completion_model(name, **({"epochs": 200} if quick and name != "per_job_mean"
                                          else {}))


def scores(truth: np.ndarray, feasible: np.ndarray, heldout: np.ndarray,
           predicted: np.ndarray, infeasible_score: np.ndarray | None) -> dict:
    """MAE and Spearman on feasible held-out entries; AUCs of "cannot co-run" on all held out."""
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    on = heldout & feasible
    out = {"mae": float(np.abs(predicted[on] - truth[on]).mean()),
           "spearman": float(spearmanr(predicted[on], truth[on]).statistic)
           if np.ptp(predicted[on]) > 0 else 0.0,
           "heldout_feasible": int(on.sum()),
           "heldout_infeasible": int((heldout & ~feasible).sum())}
    labels = (~feasible)[heldout]
    both_classes = 0 < labels.sum() < labels.size
    out["auc"] = (float(roc_auc_score(labels, infeasible_score[heldout]))
                  if both_classes and infeasible_score is not None else None)
    out["auc_from_throughput"] = (float(roc_auc_score(labels, 1 - predicted[heldout]))
                                  if both_classes else None)
    return {k: round(v, 5) if isinstance(v, float) else v for k, v in out.items()}


def fit_and_score(name: str, truth, feasible, observed, heldout, seed: int, quick: bool) -> dict:
    """Throughput model on observed feasible entries + the same model on the infeasibility
    indicator; scores on ``heldout``."""
    throughput = make_model(name, quick).fit(truth, observed & feasible, seed=seed)
    indicator = make_model(name, quick).fit((~feasible).astype(float), observed, seed=seed)
    return scores(truth, feasible, heldout, throughput.complete(), indicator.complete())


# --------------------------------------------------------------------------- experiments
def random_mask_runs(table, seeds, fractions, quick: bool) -> list[dict]:
    runs = []
    for gpu in GPU_TYPES:
        _, truth, feasible = gavel_matrix(table, gpu)
        for fraction in fractions:
            for seed in seeds:
                observed = pair_mask(len(truth), fraction, np.random.default_rng(seed))
                for name in MODELS:
                    runs.append({"experiment": "random_mask", "gpu": gpu, "fraction": fraction,
                                 "seed": seed, "model": name,
                                 **fit_and_score(name, truth, feasible, observed, ~observed,
                                                 seed, quick)})
    return runs


def unseen_job_split(n: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(new-job flags, observed mask): known block all observed, k measured pairs per new job
    with distinct random known partners (each reveals both entries of the pair)."""
    new = np.zeros(n, dtype=bool)
    new[rng.choice(n, size=max(1, round(NEW_JOB_SHARE * n)), replace=False)] = True
    observed = np.outer(~new, ~new)
    known = np.flatnonzero(~new)
    for job in np.flatnonzero(new):
        partners = rng.choice(known, size=k, replace=False)
        observed[job, partners] = observed[partners, job] = True
    return new, observed


def unseen_job_runs(table, seeds, ks, quick: bool) -> list[dict]:
    runs = []
    for gpu in GPU_TYPES:
        _, truth, feasible = gavel_matrix(table, gpu)
        n = len(truth)
        for k in ks:
            for seed in seeds:
                new, observed = unseen_job_split(n, k, np.random.default_rng(10_000 + seed))
                involves_new = new[:, None] | new[None, :]
                heldout = involves_new & ~observed
                for name in MODELS:
                    base = {"experiment": "unseen_job", "gpu": gpu, "k": k, "seed": seed,
                            "model": name}
                    runs.append({**base, "mode": "refit", **fit_and_score(
                        name, truth, feasible, observed, heldout, seed, quick)})
                    # online: pre-train on the known jobs, then SGD on each new job's pairs
                    model = make_model(name, quick).fit(
                        truth, observed & ~involves_new & feasible, seed=seed)
                    rows_, cols_ = np.indices((n, n))
                    for job in np.flatnonzero(new):   # partners are known jobs only
                        cells = np.argwhere(observed & feasible & ((rows_ == job) | (cols_ == job)))
                        if len(cells):
                            model.online_update(cells[:, 0], cells[:, 1],
                                                truth[cells[:, 0], cells[:, 1]])
                    runs.append({**base, "mode": "online", **scores(
                        truth, feasible, heldout, model.complete(), None)})
    return runs


def transfer_runs(table, seeds, quick: bool) -> list[dict]:
    mats = {gpu: gavel_matrix(table, gpu) for gpu in GPU_TYPES}
    names = {gpu: mats[gpu][0] for gpu in GPU_TYPES}
    if not (names["k80"] == names["p100"] == names["v100"]):
        raise ValueError("transfer needs the same job order on every GPU type")
    n = len(names["v100"])
    _, v_truth, v_feasible = mats["v100"]
    runs = []
    for seed in seeds:
        v_observed = pair_mask(n, TRANSFER_FRACTION, np.random.default_rng(20_000 + seed))
        sources = [mats["k80"], mats["p100"]]
        layouts = {
            # rows (gpu, job): [k80 rows; p100 rows; v100 rows] x partners
            "stack_rows": (np.vstack([m[1] for m in sources] + [v_truth]),
                           np.vstack([m[2] for m in sources] + [v_feasible]),
                           np.vstack([np.ones((n, n), bool)] * 2 + [v_observed]),
                           (slice(2 * n, 3 * n), slice(0, n))),
            # rows jobs x columns (gpu, partner): [k80 | p100 | v100]
            "stack_columns": (np.hstack([m[1] for m in sources] + [v_truth]),
                              np.hstack([m[2] for m in sources] + [v_feasible]),
                              np.hstack([np.ones((n, n), bool)] * 2 + [v_observed]),
                              (slice(0, n), slice(2 * n, 3 * n))),
            "v100_only": (v_truth, v_feasible, v_observed, (slice(0, n), slice(0, n))),
        }
        for layout, (truth, feasible, observed, v100_block) in layouts.items():
            for name in MODELS:
                throughput = make_model(name, quick).fit(truth, observed & feasible, seed=seed)
                indicator = make_model(name, quick).fit((~feasible).astype(float), observed,
                                                        seed=seed)
                runs.append({"experiment": "transfer", "layout": layout, "gpu": "v100",
                             "fraction": TRANSFER_FRACTION, "seed": seed, "model": name,
                             **scores(v_truth, v_feasible, ~v_observed,
                                      throughput.complete()[v100_block],
                                      indicator.complete()[v100_block])})
    return runs


# --------------------------------------------------------------------------- summary
def confidence_interval(values: list[float]) -> dict:
    """Mean and 95% Student-t interval over masks (None values dropped)."""
    from scipy import stats

    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return {"mean": None, "ci95": [None, None], "n": 0}
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": round(mean, 5), "ci95": [round(mean, 5)] * 2, "n": 1}
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": round(mean, 5), "ci95": [round(mean - half, 5), round(mean + half, 5)],
            "n": len(values)}


GROUP_KEYS = ("experiment", "gpu", "fraction", "k", "mode", "layout", "model")
METRICS = ("mae", "spearman", "auc", "auc_from_throughput")


def summarise(runs: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(tuple(run.get(k) for k in GROUP_KEYS), []).append(run)
    rows = []
    for key, group in groups.items():
        row = {k: v for k, v in zip(GROUP_KEYS, key) if v is not None}
        row["masks"] = len(group)
        for metric in METRICS:
            row[metric] = confidence_interval([g[metric] for g in group])
        rows.append(row)
    return rows


def goal_check(rows: list[dict], runs: list[dict]) -> dict:
    """The issue's goal at 20% observed, per GPU type: the paper NCF's MAE <= 0.05, and ahead of
    MF and of the per-job mean. "Ahead of X" (ARCHITECTURE.md, mirrored for an error): the upper
    end of NCF's 95% interval is below X's mean. Because every model sees the same masks, the
    paired difference (NCF - X, per mask) and its interval are reported too: an interval
    entirely below 0 is the stricter sense of "better"."""
    out = {}
    for gpu in GPU_TYPES:
        at = {r["model"]: r for r in rows if r["experiment"] == "random_mask"
              and r["gpu"] == gpu and r.get("fraction") == 0.2}
        if "paper_ncf" not in at:
            continue
        per_mask = {}
        for run in runs:
            if (run["experiment"], run["gpu"], run.get("fraction")) == ("random_mask", gpu, 0.2):
                per_mask.setdefault(run["model"], {})[run["seed"]] = run["mae"]
        ncf = at["paper_ncf"]["mae"]
        best = min(at, key=lambda m: at[m]["mae"]["mean"])
        out[gpu] = {"paper_ncf_mae": ncf["mean"], "paper_ncf_ci95": ncf["ci95"],
                    "mae_at_most_0.05": bool(ncf["mean"] <= GOAL_MAE),
                    "best_model": best, "best_mae": at[best]["mae"]["mean"]}
        for other in ("matrix_factorization", "per_job_mean"):
            diff = confidence_interval([per_mask["paper_ncf"][s] - per_mask[other][s]
                                        for s in per_mask["paper_ncf"]])
            out[gpu][f"ahead_of_{other}"] = bool(ncf["ci95"][1] < at[other]["mae"]["mean"])
            out[gpu][f"paired_mae_difference_vs_{other}"] = diff
            out[gpu][f"paired_better_than_{other}"] = bool(diff["ci95"][1] < 0)
    return out


# --------------------------------------------------------------------------- output
def _fmt(cell: dict, digits: int = 3) -> str:
    if cell["mean"] is None:
        return "   -   "
    return f"{cell['mean']:.{digits}f}±{(cell['ci95'][1] - cell['mean']):.{digits}f}"


def print_table(rows: list[dict]) -> None:
    print(f"{'experiment':12s} {'gpu':5s} {'setting':16s} {'model':21s} "
          f"{'MAE':>13s} {'Spearman':>13s} {'AUC':>13s} {'AUC(thr)':>13s}")
    for r in rows:
        setting = (f"{r['fraction']:.0%} observed" if r["experiment"] == "random_mask" else
                   f"k={r['k']} {r['mode']}" if r["experiment"] == "unseen_job" else r["layout"])
        print(f"{r['experiment']:12s} {r['gpu']:5s} {setting:16s} {r['model']:21s} "
              + " ".join(f"{_fmt(r[m]):>13s}" for m in METRICS))


def plot(rows: list[dict], fractions, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(GPU_TYPES), figsize=(5 * len(GPU_TYPES), 3.8), sharey=True)
    for ax, gpu in zip(np.atleast_1d(axes), GPU_TYPES):
        for i, name in enumerate(MODELS):
            cells = [next(r for r in rows if r["experiment"] == "random_mask" and r["gpu"] == gpu
                          and r["fraction"] == f and r["model"] == name) for f in fractions]
            means = [c["mae"]["mean"] for c in cells]
            err = [[c["mae"]["mean"] - c["mae"]["ci95"][0] for c in cells],
                   [c["mae"]["ci95"][1] - c["mae"]["mean"] for c in cells]]
            xs = [100 * f + (i - 1.5) * 0.6 for f in fractions]
            ax.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=name)
        ax.axhline(GOAL_MAE, color="gray", ls="--", lw=1, label="goal 0.05")
        ax.set_title(f"Gavel {gpu.upper()}: held-out feasible pairs")
        ax.set_xlabel("% of (job, partner) entries observed")
        ax.set_xticks([100 * f for f in fractions])
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("MAE of normalised throughput (95% CI)")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 masks, 20%% observed only, k=2, 200 Adam steps")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="first mask seed (reported runs: 0; tuning used 100)")
    parser.add_argument("--masks", type=int, default=None, help="masks per setting (5; quick 2)")
    parser.add_argument("--data-dir", default=None, help="folder holding the Gavel data")
    args = parser.parse_args(argv)

    import torch
    torch.set_num_threads(1)
    from interference.ncf import COMPLETION_MODELS
    from workload.traces.gavel import load_gavel

    table = load_gavel(args.data_dir)
    masks = args.masks or (2 if args.quick else 5)
    seeds = list(range(args.first_seed, args.first_seed + masks))
    fractions = (0.2,) if args.quick else FRACTIONS
    ks = (2,) if args.quick else UNSEEN_K
    started = time.perf_counter()
    runs = random_mask_runs(table, seeds, fractions, args.quick)
    runs += unseen_job_runs(table, seeds, ks, args.quick)
    runs += transfer_runs(table, seeds, args.quick)
    elapsed = time.perf_counter() - started
    rows = summarise(runs)
    goal = goal_check(rows, runs)
    print_table(rows)
    for gpu, g in goal.items():
        mf = g["paired_mae_difference_vs_matrix_factorization"]
        print(f"goal at 20% on {gpu}: paper NCF MAE {g['paper_ncf_mae']:.3f} "
              f"(<= 0.05: {g['mae_at_most_0.05']}; ahead of MF: "
              f"{g['ahead_of_matrix_factorization']}, paired NCF-MF {mf['mean']:+.4f} "
              f"[{mf['ci95'][0]:+.4f}, {mf['ci95'][1]:+.4f}]; ahead of per-job mean: "
              f"{g['ahead_of_per_job_mean']}); best model {g['best_model']} {g['best_mae']:.3f}")
    name = "ncf-quick" if args.quick else "ncf"
    settings = {m: asdict(make_model(m, args.quick).settings) for m in COMPLETION_MODELS}
    path = write_result(name, {
        "data": table.source, "gpu_types": list(GPU_TYPES), "seeds": seeds,
        "fractions": list(fractions), "unseen_k": list(ks), "new_job_share": NEW_JOB_SHARE,
        "transfer_fraction": TRANSFER_FRACTION, "model_settings": settings,
        "tuning": "hyperparameters chosen on mask seeds 100-104; reported seeds never used",
        "infeasible_score": "auc: same model fitted on the 'cannot co-run' indicator; "
                            "auc_from_throughput: 1 - predicted throughput",
        "elapsed_s": round(elapsed, 1), "goal": goal, "summary": rows, "runs": runs})
    plot(rows, fractions, RESULTS / f"{name}.png")
    print(f"{elapsed:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
