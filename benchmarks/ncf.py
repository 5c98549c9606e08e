"""Interference prediction on real Gavel measurements: per-job mean, MF, the paper's NCF, NeuMF.

For each GPU type (k80, p100, v100) the matrix is Gavel's measured co-location throughput of the
26 scale-1 job types: entry (job, partner) = the job's throughput while sharing the GPU with the
partner, divided by its throughput alone ("normalised throughput", in [0, 1]); (0, 0) pairs
cannot co-run ("infeasible").

    python -m benchmarks.ncf [--quick] [--first-seed 0] [--masks 10]

Experiments (every one repeated over random masks; mean and 95% Student-t interval over masks,
and for each model the paired difference to MF over the same masks with its interval):

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

Hyperparameters were chosen on masks of seeds 100-109 (``TUNING_SEEDS``; ``--first-seed 100``
runs them and labels the result a tuning run); the reported masks use seeds 0-9 (``--quick``:
0-1), never used for tuning. A run whose seeds partly overlap the tuning seeds is refused.

The JSON keeps the summary of the last 5-mask run (seeds 0-4, the models before the paper NCF's
MF prior) under ``previous_5_seeds``, carried over from the ``ncf.json`` it replaces.

Writes benchmarks/results/ncf.json (``ncf-quick.json``) and ncf.png (``ncf-quick.png``: MAE with
95% intervals per GPU type and fraction; below, each model's paired difference to MF).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import asdict

import numpy as np

from benchmarks._common import RESULTS, description, write_result

MODELS = ("per_job_mean", "matrix_factorization", "paper_ncf", "neumf")
GPU_TYPES = ("k80", "p100", "v100")
FRACTIONS = (0.1, 0.2, 0.4)
GOAL_MAE = 0.05          # the issue's goal at 20% observed
NEW_JOB_SHARE = 0.2      # unseen-job split: share of jobs held out as new
UNSEEN_K = (2, 4)        # co-location measurements per new job
TRANSFER_FRACTION = 0.1  # V100 observed in the transfer experiment
MASKS = 10               # masks per setting in a full run (seeds first_seed .. first_seed + 9)
QUICK_MASKS = 2          # masks per setting with --quick
TUNING_SEEDS = tuple(range(100, 110))   # mask seeds hyperparameters were chosen on
PREVIOUS_KEY = "previous_5_seeds"       # the JSON key of the last 5-mask run's summary

__all__ = ["gavel_matrix", "pair_mask", "unseen_job_split", "confidence_interval", "summarise",
           "goal_check", "paired_differences", "check_seeds", "previous_summary", "main"]


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

    # --quick: fewer Adam steps (same learning rates; the NCF's MF prior too), so the smoke
    # run is fast
    quick_settings = {"epochs": 200, **({"prior_epochs": 200} if name == "paper_ncf" else {})}
    return make_completion_model(name, **(quick_settings if quick and name != "per_job_mean"
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


def paired_differences(runs: list[dict], reference: str = "matrix_factorization") -> list[dict]:
    """Random-mask MAE of each model minus ``reference``'s on the same mask: mean and 95%
    interval per (GPU type, fraction, model). Every model sees the same masks, so the paired
    interval is much narrower than the gap between two unpaired ones."""
    by_mask: dict[tuple, dict[str, float]] = {}
    for run in runs:
        if run["experiment"] == "random_mask":
            key = (run["gpu"], run["fraction"], run["seed"])
            by_mask.setdefault(key, {})[run["model"]] = run["mae"]
    groups: dict[tuple, list[float]] = {}
    for (gpu, fraction, _), maes in by_mask.items():
        for model, mae in maes.items():
            if model != reference and reference in maes:
                groups.setdefault((gpu, fraction, model), []).append(mae - maes[reference])
    return [{"gpu": gpu, "fraction": fraction, "model": model, "reference": reference,
             "mae_difference": confidence_interval(values)}
            for (gpu, fraction, model), values in groups.items()]


def goal_check(rows: list[dict], runs: list[dict]) -> dict:
    """The issue's goal at 20% observed, per GPU type: the paper NCF's MAE <= 0.05, at least as
    good as MF (mean MAE not above MF's; issue 14), and ahead of MF and of the per-job mean.
    "Ahead of X" (ARCHITECTURE.md, mirrored for an error): the upper end of NCF's 95% interval
    is below X's mean. Because every model sees the same masks, the paired difference
    (NCF - X, per mask) and its interval are reported too: an interval entirely below 0 is the
    stricter sense of "better"."""
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
        out[gpu]["at_least_as_good_as_matrix_factorization"] = bool(
            ncf["mean"] <= at["matrix_factorization"]["mae"]["mean"])
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


def plot(rows: list[dict], paired: list[dict], fractions, masks: int, path) -> None:
    """Top: MAE with 95% intervals per GPU type and fraction. Bottom: paired MAE difference of
    each learned model to MF (below 0: better than MF) with its 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, len(GPU_TYPES), figsize=(5 * len(GPU_TYPES), 7.2),
                             sharey="row", squeeze=False)
    for ax, gpu in zip(grid[1], GPU_TYPES):
        for i, name in enumerate(MODELS):
            cells = [next((p["mae_difference"] for p in paired if p["gpu"] == gpu
                           and p["fraction"] == f and p["model"] == name), None)
                     for f in fractions]
            # the per-job mean is 0.04-0.06 behind MF (top row); left out, the learned
            # models' small gaps stay readable
            if name in ("matrix_factorization", "per_job_mean") or any(
                    c is None or c["mean"] is None for c in cells):
                continue
            means = [c["mean"] for c in cells]
            err = [[c["mean"] - c["ci95"][0] for c in cells],
                   [c["ci95"][1] - c["mean"] for c in cells]]
            xs = [100 * f + (i - 1.5) * 0.6 for f in fractions]
            ax.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=f"{name} - MF",
                        color=f"C{i}")
        ax.axhline(0.0, color="gray", lw=1)
        ax.set_xlabel("% of (job, partner) entries observed")
        ax.set_xticks([100 * f for f in fractions])
        ax.grid(alpha=0.3)
    grid[1][0].set_ylabel("paired MAE difference to MF (95% CI)")
    grid[1][0].legend(fontsize=8)
    axes = grid[0]
    for ax, gpu in zip(np.atleast_1d(axes), GPU_TYPES):
        for i, name in enumerate(MODELS):
            cells = [next(r for r in rows if r["experiment"] == "random_mask" and r["gpu"] == gpu
                          and r["fraction"] == f and r["model"] == name) for f in fractions]
            means = [c["mae"]["mean"] for c in cells]
            err = [[c["mae"]["mean"] - c["mae"]["ci95"][0] for c in cells],
                   [c["mae"]["ci95"][1] - c["mae"]["mean"] for c in cells]]
            xs = [100 * f + (i - 1.5) * 0.6 for f in fractions]
            ax.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=name, color=f"C{i}")
        ax.axhline(GOAL_MAE, color="gray", ls="--", lw=1, label="goal 0.05")
        ax.set_title(f"Gavel {gpu.upper()}: held-out feasible pairs ({masks} masks)")
        ax.set_xlabel("% of (job, partner) entries observed")
        ax.set_xticks([100 * f for f in fractions])
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("MAE of normalised throughput (95% CI)")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def check_seeds(seeds: list[int]) -> str:
    """"evaluation" (disjoint from the tuning seeds) or "tuning" (all of them tuning seeds); a
    mix is refused: its numbers would be partly scored on masks the settings were chosen on."""
    tuning = set(seeds) & set(TUNING_SEEDS)
    if not tuning:
        return "evaluation"
    if tuning == set(seeds):
        return "tuning"
    raise ValueError(f"mask seeds {seeds[0]}-{seeds[-1]} overlap the tuning seeds "
                     f"{TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]} only in part: report on seeds "
                     "disjoint from them, or tune on tuning seeds only")


def previous_summary(path) -> dict | None:
    """The last 5-mask run kept for comparison, read from the ``ncf.json`` at ``path`` (before it
    is replaced): its own ``previous_5_seeds`` block if it has one, else the file itself if it
    is a 5-mask run; None if there is no file or it is another run. A file that is not such a
    result raises ValueError (delete it, or restore it from git)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable benchmark result ({exc}); restore it with "
                         "git or delete it") from exc
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(document).__name__}")
    if PREVIOUS_KEY in document:
        block = document[PREVIOUS_KEY]
        if not (isinstance(block, dict) and isinstance(block.get("summary"), list)):
            raise ValueError(f"{path}: {PREVIOUS_KEY!r} must be an object with a 'summary' list")
        return block
    seeds, summary = document.get("seeds"), document.get("summary")
    if not (isinstance(seeds, list) and isinstance(summary, list)):
        raise ValueError(f"{path}: a benchmark result needs 'seeds' and 'summary' lists")
    if len(seeds) != 5:
        return None
    return {key: document.get(key) for key in ("git_commit", "seeds", "fractions",
                                               "model_settings", "goal", "summary")}


def _print_previous(previous: dict | None, rows: list[dict]) -> None:
    """Old (5 masks) against new paper NCF and MF at 20% observed, per GPU type."""
    if not previous:
        return
    def mean(summary, gpu, model):
        cell = next((r for r in summary if r.get("experiment") == "random_mask"
                     and r.get("gpu") == gpu and r.get("fraction") == 0.2
                     and r.get("model") == model), None)
        return cell["mae"]["mean"] if cell else None
    for gpu in GPU_TYPES:
        old = {m: mean(previous["summary"], gpu, m) for m in ("matrix_factorization", "paper_ncf")}
        new = {m: mean(rows, gpu, m) for m in old}
        if None not in old.values() and None not in new.values():
            print(f"20% {gpu}: previous 5 seeds MF {old['matrix_factorization']:.4f} NCF "
                  f"{old['paper_ncf']:.4f}; this run MF {new['matrix_factorization']:.4f} NCF "
                  f"{new['paper_ncf']:.4f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true",
                        help="2 masks, 20%% observed only, k=2, 200 Adam steps")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="first mask seed (reported runs: 0; tuning: 100)")
    parser.add_argument("--masks", type=int, default=None,
                        help=f"masks per setting ({MASKS}; quick {QUICK_MASKS})")
    parser.add_argument("--data-dir", default=None, help="folder holding the Gavel data")
    args = parser.parse_args(argv)
    masks = args.masks or (QUICK_MASKS if args.quick else MASKS)
    if masks < 2:
        parser.error("--masks must be >= 2 (an interval needs two masks)")
    seeds = list(range(args.first_seed, args.first_seed + masks))
    purpose = check_seeds(seeds)

    import torch
    torch.set_num_threads(1)
    from interference.ncf import COMPLETION_MODELS
    from workload.traces.gavel import load_gavel

    table = load_gavel(args.data_dir)
    name = "ncf-quick" if args.quick else "ncf"
    previous = previous_summary(RESULTS / "ncf.json")
    fractions = (0.2,) if args.quick else FRACTIONS
    ks = (2,) if args.quick else UNSEEN_K
    started = time.perf_counter()
    runs = random_mask_runs(table, seeds, fractions, args.quick)
    runs += unseen_job_runs(table, seeds, ks, args.quick)
    runs += transfer_runs(table, seeds, args.quick)
    elapsed = time.perf_counter() - started
    rows = summarise(runs)
    paired = paired_differences(runs)
    goal = goal_check(rows, runs)
    print_table(rows)
    for gpu, g in goal.items():
        mf = g["paired_mae_difference_vs_matrix_factorization"]
        print(f"goal at 20% on {gpu}: paper NCF MAE {g['paper_ncf_mae']:.4f} "
              f"(<= 0.05: {g['mae_at_most_0.05']}; at least as good as MF: "
              f"{g['at_least_as_good_as_matrix_factorization']}; paired NCF-MF "
              f"{mf['mean']:+.4f} [{mf['ci95'][0]:+.4f}, {mf['ci95'][1]:+.4f}]; ahead of per-job "
              f"mean: {g['ahead_of_per_job_mean']}); best model {g['best_model']} "
              f"{g['best_mae']:.4f}")
    _print_previous(previous, rows)
    settings = {m: asdict(make_model(m, args.quick).settings) for m in COMPLETION_MODELS}
    path = write_result(name, {
        "data": table.source, "gpu_types": list(GPU_TYPES), "seeds": seeds,
        "seed_purpose": purpose, "tuning_seeds": list(TUNING_SEEDS),
        "fractions": list(fractions), "unseen_k": list(ks), "new_job_share": NEW_JOB_SHARE,
        "transfer_fraction": TRANSFER_FRACTION, "model_settings": settings,
        "tuning": f"hyperparameters chosen on mask seeds {TUNING_SEEDS[0]}-{TUNING_SEEDS[-1]}; "
                  "reported seeds never used",
        "infeasible_score": "auc: same model fitted on the 'cannot co-run' indicator; "
                            "auc_from_throughput: 1 - predicted throughput",
        "elapsed_s": round(elapsed, 1), "goal": goal, "summary": rows,
        "paired_vs_matrix_factorization": paired, PREVIOUS_KEY: previous, "runs": runs})
    plot(rows, paired, fractions, masks, RESULTS / f"{name}.png")
    print(f"{elapsed:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
