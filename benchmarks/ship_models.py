"""Train the model files that ship with streamplace (``placement/models/``), reproducibly.

    python -m benchmarks.ship_models                       # every shipped model (~50 min, 2 cores)
    python -m benchmarks.ship_models --models residual     # one of them
    make models                                            # the same as the first line
    python -m benchmarks.ship_models --check --models ncf  # rebuild and compare
    make models-check                                      # all of them (~20 min)

Each model is trained by the same code as ``benchmarks/ldwp.py`` on the paper cluster with
TRAINING seeds only (checkpoints, where chosen, on the TUNING seeds; never the evaluation
seeds), with ``torch`` on one thread, so the same code gives the same file bit for bit. Its
metadata records the command that rebuilds it, the seeds, and ``training_data_sha256``: the
SHA-256 of what it learned from (the calibration file, the co-location table the simulator
used, by its numbers and not the folder it was read from, the cluster and every training
workload), so a file trained on generated data (no ``STREAMPLACE_DATA_DIR``) is told apart from
one trained on the real traces, and the same data gives the same hash on every machine.

- ``residual``: the residual LDWP (MCT prior plus a learned, evidence-weighted correction),
  12 saturated episodes of short bursts, 600, 300 and 150 tasks in turn (``RESIDUAL_TASKS``), and
  the checkpoint (one after every episode, the untrained agent, i.e. MCT, included) whose worst
  ratio to MCT's tuning throughput over bursts of 150, 300 and 1,500 tasks is highest
  (``benchmarks.ldwp.prior_ratio_check``). Why: trained on 1,500-task bursts alone (as
  ``benchmarks/ldwp.py`` still does, 10 episodes) the correction lost 19% to MCT on 300-task
  bursts it never trained on; trained on short ones it is ahead of MCT on both
  (docs/results-simulator.md).
- ``size_agnostic``: the node-scoring network (one score per node row, so it runs on any
  cluster), pre-trained on MCT's decisions (1,500-task workloads), then 12 saturated online
  episodes of the same short bursts as ``residual``, with a checkpoint after every episode (the
  pre-trained network included) chosen by the same rule. Why: after 8 episodes of 1,500 tasks
  it lost 10% to MCT on 300-task tuning bursts and 4% on 1,500-task ones, where the pre-trained
  network alone was within 1.5% of MCT on every burst length.
- ``paper``: the paper's network (one output per node of the paper cluster), pre-trained the
  same way; it moves to another cluster only through ``placement.ldwp.transfer``.
- ``energy``: the residual LDWP with the energy-aware reward (``LDWPSettings.energy_weight``,
  lambda ``benchmarks.energy_ldwp.ENERGY_WEIGHT``, chosen on the tuning seeds by
  ``python -m benchmarks.energy_ldwp --sweep`` on 1,500-task episodes), trained on the same
  short bursts as ``residual``; its checkpoint is the lowest tuning energy per task at 30
  tasks/min among those that keep 95% of MCT's saturated tuning throughput on every burst
  length (``benchmarks.energy_ldwp.energy_check``).
- ``ncf``: the interference models in ``interference/models/`` (see
  ``interference.ncf.shipped``): matrix factorisation and the paper's NCF per GPU type, fitted
  (seed 0) on every feasible entry of Gavel's co-location matrix; seconds.

Users start from them::

    from placement.ldwp.agent import LDWPPolicy
    from placement.ldwp.shipped import shipped_model
    agent = LDWPPolicy.from_file(shipped_model("residual"), cluster, costs)
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import description
from placement.ldwp.shipped import SHIPPED_MODELS

MODELS = Path(__file__).resolve().parent.parent / "placement" / "models"
SHIPPED_RESIDUAL = MODELS / SHIPPED_MODELS["residual"]
#: training episodes of every shipped model but ``residual``
EPISODES = 8
#: tasks per training episode of every shipped model but ``residual``, as benchmarks/ldwp.py
TASKS = 1500
#: the residual model's episodes, and its tasks per episode (a pattern repeated over them)
RESIDUAL_EPISODES = 12
RESIDUAL_TASKS = (600, 300, 150)
#: shipped name -> (benchmarks.ldwp variant, pre-trained on MCT's decisions)
TRAINED_AS = {"residual": ("residual", True), "size_agnostic": ("node_scoring", True),
              "paper": ("paper", True), "energy": ("residual_energy", True)}


#: the shipped models trained on short bursts (RESIDUAL_TASKS over RESIDUAL_EPISODES)
SHORT_BURSTS = ("residual", "size_agnostic", "energy")


def checkpoint_check(name: str):
    """How the shipped model ``name``'s checkpoint is chosen (a ``benchmarks.ldwp`` check,
    scored after every episode), or None when its last weights ship."""
    from benchmarks.energy_ldwp import energy_check
    from benchmarks.ldwp import prior_ratio_check
    return {"residual": prior_ratio_check, "size_agnostic": prior_ratio_check,
            "energy": energy_check}.get(name)


def episodes_of(name: str) -> int:
    """Training episodes of the shipped model ``name``."""
    return RESIDUAL_EPISODES if name in SHORT_BURSTS else EPISODES


def tasks_of(name: str) -> int | tuple[int, ...]:
    """Tasks per training episode of the shipped model ``name`` (a pattern, for the models
    trained on short bursts)."""
    return RESIDUAL_TASKS if name in SHORT_BURSTS else TASKS


def training_data_hash(variant: str, episodes: int, tasks: int | tuple[int, ...]) -> str:
    """SHA-256 over everything the model learns from (see the module docstring)."""
    from benchmarks.ldwp import PRIOR_CHECK_BURSTS, TUNING_SEEDS, online_plan
    from simulator.scenarios import paper_cluster, paper_workload, saturated_workload
    from workload.traces.gavel import load_or_generate_colocation
    digest = hashlib.sha256()
    digest.update((Path(__file__).resolve().parent.parent / "workload" /
                   "calibration.yaml").read_bytes())
    table = load_or_generate_colocation()
    # the table's numbers, not its ``source``: that names the folder it was read from, which
    # differs between checkouts (/work/shared/data here, another path on CI) for the same data
    digest.update(repr((table.isolated, table.colocated)).encode())
    digest.update(repr(paper_cluster()).encode())
    seeds = online_plan(variant, episodes, tasks)   # what the trainers run, in order
    # and the workloads the checkpoints are judged on (those of checkpoint_check(name))
    if variant == "residual" or (variant == "node_scoring" and not isinstance(tasks, int)):
        # their checkpoints are judged on bursts of several lengths
        seeds += [(s, burst, None) for burst, chosen in PRIOR_CHECK_BURSTS.items()
                  for s in chosen]
    elif variant == "residual_energy":  # ... also at 30 tasks/min
        from benchmarks.energy_ldwp import ENERGY_CHECK_TASKS, TUNING_RATE
        measured = tasks if isinstance(tasks, int) else ENERGY_CHECK_TASKS
        seeds += [(s, measured, None) for s in TUNING_SEEDS]
        seeds += [(s, measured, TUNING_RATE) for s in TUNING_SEEDS]
        if not isinstance(tasks, int):  # and on bursts of several lengths, as the residual's
            seeds += [(s, burst, None) for burst, chosen in PRIOR_CHECK_BURSTS.items()
                      for s in chosen]
    for seed, count, rate in seeds:
        workload = (saturated_workload(count, seed=seed) if rate is None
                    else paper_workload(rate, count, seed=seed))
        for task in workload:
            digest.update(repr(task).encode())
    return digest.hexdigest()


def ship_metadata(name: str, episodes: int | None = None,
                  learning_trust_rule: str | None = None) -> dict:
    """What a shipped file's header records beside its settings: the command that rebuilds
    it, its name, the hash of its training data (and, for ``energy``, how lambda was chosen;
    for the models trained on short bursts, their episodes' lengths and how the checkpoint was
    chosen)."""
    variant = TRAINED_AS[name][0]
    episodes = episodes or episodes_of(name)
    command = f"python -m benchmarks.ship_models --models {name}" + (
        "" if episodes == episodes_of(name) else f" --episodes {episodes}") + (
        f" --learning-trust-rule {learning_trust_rule} --out FILE"
        if learning_trust_rule else "")
    extra = {"command": command, "shipped_as": name,
             "training_data_sha256": training_data_hash(variant, episodes, tasks_of(name))}
    if name in SHORT_BURSTS:
        from benchmarks.ldwp import PRIOR_CHECK_BURSTS
        extra["episode_tasks"] = list(RESIDUAL_TASKS)
        extra["checkpoint_rule"] = (
            "highest worst ratio to MCT's mean saturated throughput on the tuning seeds over "
            f"bursts of {', '.join(str(b) for b in PRIOR_CHECK_BURSTS)} tasks "
            "(benchmarks.ldwp.prior_ratio_check)")
    if name == "energy":
        from benchmarks.energy_ldwp import ENERGY_SWEEP, THROUGHPUT_FLOOR, TUNING_RATE
        extra["energy_weight_chosen_by"] = (
            f"python -m benchmarks.energy_ldwp --sweep: lambda in {list(ENERGY_SWEEP)} with the "
            f"lowest tuning energy per task at {TUNING_RATE}/min, saturated tuning throughput "
            f">= {THROUGHPUT_FLOOR} x MCT's on every burst length, each lambda trained as this "
            "file is (on 1,500-task episodes it chose the same lambda)")
        extra["checkpoint_rule"] = (
            f"lowest tuning energy per task at {TUNING_RATE}/min among checkpoints whose worst "
            f"ratio to MCT's saturated tuning throughput over bursts of "
            f"{', '.join(str(b) for b in PRIOR_CHECK_BURSTS)} tasks is >= {THROUGHPUT_FLOOR} "
            "(benchmarks.energy_ldwp.energy_check)")
    return extra


def experiment_problem(name: str, out: Path | None, learning_trust_rule: str | None) -> str:
    """Why training ``name`` into ``out`` with ``learning_trust_rule`` is refused ("" when it
    is not): that rule is an experiment on the residual model, never written over a shipped
    file."""
    if not learning_trust_rule:
        return ""
    if name != "residual" or out is None or \
            Path(out).resolve() == (MODELS / SHIPPED_MODELS["residual"]).resolve():
        return ("learning_trust_rule is an experiment on the residual model: it needs "
                "--models residual and --out FILE other than the shipped file")
    return ""


def ship(name: str, episodes: int | None = None, out: Path | None = None,
         learning_trust_rule: str | None = None) -> dict:
    """Train one shipped model and write it to ``out`` (default: its place in the package).
    ``learning_trust_rule`` (residual only, an experiment: needs ``out``): the trust rule the
    agent acts on while it learns, instead of the default ``per_node`` (docs/ldwp.md)."""
    from benchmarks.ldwp import train_variant
    problem = experiment_problem(name, out, learning_trust_rule)
    if problem:
        raise ValueError(problem)
    variant, pretrained = TRAINED_AS[name]
    episodes = episodes or episodes_of(name)
    out = out or MODELS / SHIPPED_MODELS[name]
    extra = ship_metadata(name, episodes, learning_trust_rule)
    overrides = {"learning_trust_rule": learning_trust_rule} if learning_trust_rule else None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ship-models-") as tmp:
        job = (variant, pretrained, episodes, tasks_of(name), tmp, extra)
        trained = train_variant(job, check=checkpoint_check(name), check_every=1,
                                overrides=overrides)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trained["model"], out)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    report = {"name": name, "file": str(out), "bytes": out.stat().st_size, "sha256": digest,
              "wall_s": time.perf_counter() - started, "episodes": episodes}
    if "checkpoints" in trained:
        report["chosen_episode"] = trained["chosen_episode"]
        report["tuning_throughput_per_min"] = [c["tuning_throughput_per_min"]
                                               for c in trained["checkpoints"]]
        report["tuning_ratio_to_prior"] = [c.get("tuning_ratio_to_prior")
                                           for c in trained["checkpoints"]]
    return report


NCF_SEED = 0


def ship_ncf(folder: Path | None = None) -> list[dict]:
    """Fit and write every shipped interference model (``interference.ncf.shipped``) into
    ``folder`` (default: their place in the package)."""
    import numpy as np
    import torch

    from benchmarks.ncf import gavel_matrix
    from interference.ncf import make_completion_model
    from interference.ncf.modelfile import save_completion_model
    from interference.ncf.shipped import SHIPPED_GPU_TYPES, SHIPPED_NCF_MODELS
    from workload.traces.gavel import load_or_generate_colocation
    torch.set_num_threads(1)
    table = load_or_generate_colocation()
    source = str(getattr(table, "source", "gavel"))
    # the file's name, not this machine's path to it (the generator's note is kept whole)
    source = source if source.startswith("generated") else "/".join(Path(source).parts[-2:])
    folder = folder or MODELS.parent.parent / "interference" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    reports = []
    for gpu in SHIPPED_GPU_TYPES:
        jobs, throughput, feasible = gavel_matrix(table, gpu)
        data = hashlib.sha256(np.ascontiguousarray(throughput, "<f8").tobytes()
                              + np.ascontiguousarray(feasible, "u1").tobytes()
                              + "\n".join(jobs).encode()).hexdigest()
        for name in SHIPPED_NCF_MODELS:
            started = time.perf_counter()
            model = make_completion_model(name).fit(np.where(feasible, throughput, np.nan),
                                                    feasible, seed=NCF_SEED)
            out = folder / f"{name}_{gpu}.spncf"
            save_completion_model(out, model, {
                "command": "python -m benchmarks.ship_models --models ncf", "seed": NCF_SEED,
                "gpu_type": gpu, "jobs": jobs, "source": source,
                "training_data_sha256": data,
                "fitted_on": "every feasible entry (job, partner) of the scale-1 jobs"})
            reports.append({"name": f"{name}_{gpu}", "file": str(out),
                            "bytes": out.stat().st_size,
                            "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
                            "wall_s": time.perf_counter() - started})
    return reports


#: how far a rebuilt interference model's completion may be from the shipped one's where the
#: bytes differ (values are normalised throughputs in [0, 1]). Why not bytes alone: torch is not
#: pinned (``torch>=2.2``), and another torch build or CPU kernel (AVX-512 against AVX2) changes
#: the last bits of a float32 step, which the paper NCF's 600 full-batch Adam steps amplify.
#: Measured 2026-12-06, torch 2.15.0 against the files of 2026-12-05: matrix factorisation
#: identical to 1e-6; the paper NCF at most 0.013 apart (mean 0.0024) per GPU type, with the
#: same metadata. A doubled L2 weight moves it by a mean of 0.009 and at most 0.056; another seed
#: (also in the metadata, which must match exactly) by a mean of 0.002 to 0.008.
NCF_MEAN_TOLERANCE = 0.005
NCF_MAX_TOLERANCE = 0.03


@dataclass(frozen=True)
class RebuildCheck:
    """One shipped file against its rebuild: ``problem`` is None when it is what its command
    builds today (``same_bytes``, or for an interference model, within the tolerances above)."""
    path: str
    same_bytes: bool
    problem: str | None = None


def ncf_rebuild_problem(rebuilt: bytes, shipped: bytes) -> str | None:
    """Why the shipped interference model file ``shipped`` is not what ``rebuilt`` is (None:
    it is): unreadable, other metadata, or a completion beyond the tolerances."""
    import numpy as np

    from interference.ncf.modelfile import (MAGIC, MAX_HEADER_BYTES, CompletionModelFileError,
                                            parse_completion_model)
    from workload.arrayfile import read_arrays
    try:
        shipped_model, _ = parse_completion_model(shipped, "the shipped file")
    except CompletionModelFileError as refused:
        return f"unreadable: {refused}"
    rebuilt_model, _ = parse_completion_model(rebuilt, "the rebuild")
    headers = [read_arrays(data, "model file", MAGIC, max_header_bytes=MAX_HEADER_BYTES)[1]
               for data in (rebuilt, shipped)]
    if headers[0] != headers[1]:
        changed = sorted(k for k in headers[0].keys() | headers[1].keys()
                         if headers[0].get(k) != headers[1].get(k))
        return f"other metadata ({', '.join(changed)})"
    apart = np.abs(rebuilt_model.complete() - shipped_model.complete())
    if apart.mean() > NCF_MEAN_TOLERANCE or apart.max() > NCF_MAX_TOLERANCE:
        return (f"completion {apart.mean():.4f} apart on average, {apart.max():.4f} at most "
                f"(tolerances {NCF_MEAN_TOLERANCE}, {NCF_MAX_TOLERANCE})")
    return None


def check(names: list[str], episodes: int | None = None) -> list[RebuildCheck]:
    """Rebuild the shipped models ``names`` (``ncf``: all six interference files) into a
    temporary folder and compare every shipped file with its rebuild (nothing shipped is
    written). The LDWP files must be the same bytes: their training episodes take different
    decisions once a bit differs, so no tolerance on weights says what a rebuild on another
    torch build should give (rebuild them where they were built). The LDWP files take minutes
    each; ``ncf`` seconds."""
    import torch

    from interference.ncf.shipped import shipped_ncf_model
    checks, threads = [], torch.get_num_threads()   # the builds use one thread: given back
    try:
        with tempfile.TemporaryDirectory(prefix="ship-check-") as tmp:
            if "ncf" in names:
                for report in ship_ncf(Path(tmp)):
                    model, gpu = report["name"].rsplit("_", 1)
                    shipped = shipped_ncf_model(model, gpu)
                    rebuilt, kept = Path(report["file"]).read_bytes(), shipped.read_bytes()
                    checks.append(RebuildCheck(str(shipped), rebuilt == kept, None
                                               if rebuilt == kept
                                               else ncf_rebuild_problem(rebuilt, kept)))
            for name in (n for n in names if n != "ncf"):
                shipped = MODELS / SHIPPED_MODELS[name]
                rebuilt = ship(name, episodes, Path(tmp) / shipped.name)
                same = Path(rebuilt["file"]).read_bytes() == shipped.read_bytes()
                checks.append(RebuildCheck(str(shipped), same,
                                           None if same else "other bytes"))
    finally:
        torch.set_num_threads(threads)
    return checks


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--models", default=",".join((*TRAINED_AS, "ncf")),
                        help=f"comma-separated, from {', '.join(TRAINED_AS)}, ncf")
    parser.add_argument("--episodes", type=int, default=None,
                        help="training episodes (default: each model's own)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output file (only with a single --models name)")
    parser.add_argument("--learning-trust-rule", choices=("per_node", "pooled"), default=None,
                        help="residual only, with --out (an experiment, never shipped): the "
                             "trust rule the agent acts on while it learns (default per_node)")
    parser.add_argument("--check", action="store_true",
                        help="rebuild into a temporary folder and compare with the shipped "
                             "files (byte for byte; the interference models within "
                             "NCF_MEAN_TOLERANCE / NCF_MAX_TOLERANCE where the bytes differ); "
                             "exit 1 naming those that differ")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRAINED_AS and n != "ncf"]
    if unknown or not names:
        parser.error(f"unknown model(s) {unknown}; shipped: {', '.join(TRAINED_AS)}, ncf")
    if args.out and (len(names) != 1 or names == ["ncf"] or args.check):
        parser.error("--out needs exactly one --models name (not ncf), and no --check")
    problem = experiment_problem(names[0] if len(names) == 1 else "", args.out,
                                 args.learning_trust_rule)
    if problem:
        parser.error(problem)
    if args.check:
        checks = check(names, args.episodes)
        differ = [c for c in checks if c.problem]
        for found in differ:
            print(f"differs from its rebuild: {found.path} ({found.problem})")
        if differ:
            raise SystemExit(1)
        close = sum(not c.same_bytes for c in checks)
        print(f"every checked file ({', '.join(names)}) is what its command builds today"
              + (f" ({close} of {len(checks)} within the tolerances of another torch build, "
                 "not the same bytes)" if close else " (the same bytes)"))
        return
    if "ncf" in names:
        for report in ship_ncf():
            print(f"wrote {report['file']} ({report['bytes']} bytes, sha256 "
                  f"{report['sha256'][:16]}) in {report['wall_s']:.1f} s")
        names.remove("ncf")
    for name in names:
        report = ship(name, args.episodes, args.out, args.learning_trust_rule)
        print(f"wrote {report['file']} ({report['bytes']} bytes, sha256 "
              f"{report['sha256'][:16]}) in {report['wall_s']:.0f} s"
              + (f"; checkpoint episode {report['chosen_episode']}, tuning throughput "
                 f"{[round(v, 1) for v in report['tuning_throughput_per_min']]}"
                 if "chosen_episode" in report else ""))


if __name__ == "__main__":
    main()
