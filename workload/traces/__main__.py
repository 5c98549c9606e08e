"""Print what the trace readers find: ``python -m workload.traces [data_dir]``.

Reads every real file (or says it is missing and summarises the generated stand-in) and prints
the facts quoted in docs/data.md: row counts, GPU models, Gavel co-location statistics.
"""

from __future__ import annotations

import logging
import statistics
import sys

from . import (
    load_or_generate_azure,
    load_or_generate_colocation,
    load_or_generate_genai,
    load_or_generate_nodes,
    load_or_generate_pods,
    resolve_data_dir,
)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    data_dir = argv[0] if argv else None
    print(f"data dir: {resolve_data_dir(data_dir)}")

    for which in ("all", "gpu"):
        nodes = load_or_generate_nodes(data_dir, which=which)
        models = ", ".join(f"{m or 'CPU-only'} {c}" for m, c in nodes.model_counts().items())
        print(f"nodes[{which}]: {len(nodes)} ({models})  <- {nodes.source}")
    for variant in ("default", "gpushare100", "gpuspec33"):
        pods = load_or_generate_pods(data_dir, variant=variant)
        gpu_pods = [p for p in pods if p.num_gpu]
        print(f"pods[{variant}]: {len(pods)}, fractional GPU {sum(p.fractional_gpu for p in pods)},"
              f" GPU-type constrained {sum(bool(p.gpu_spec) for p in gpu_pods)}/{len(gpu_pods)},"
              f" span {pods.arrivals()[-1] / 86400:.1f} days  <- {pods.source}")
    genai = load_or_generate_genai(data_dir)
    print(f"genai: {len(genai)} requests over {genai.duration_s / 86400:.2f} days, median exec "
          f"{statistics.median(r.exec_time_ms for r in genai) / 1000:.1f} s  <- {genai.source}")
    for kind in ("code", "conv"):
        azure = load_or_generate_azure(data_dir, kind=kind)
        print(f"azure[{kind}]: {len(azure)} requests over {azure.duration_s:.0f} s  "
              f"<- {azure.source}")

    for measurements in ("simulation", "physical"):
        table = load_or_generate_colocation(data_dir, measurements=measurements)
        print(f"colocation[{measurements}] <- {table.source}")
        for gpu in table.gpu_types:
            jobs = table.jobs(gpu)
            speeds = [table.speed_factor(j, gpu, reference=table.gpu_types[0]) for j in jobs
                      if table.isolated[table.gpu_types[0]].get(j)]
            for unordered in (False, True):
                s = table.stats(gpu, unordered=unordered)
                label = "unordered" if unordered else "ordered  "
                print(f"  {gpu:20s} {label} jobs {len(jobs)} ({len({j.model for j in jobs})} "
                      f"types) pairs {s.pairs} infeasible {s.infeasible} "
                      f"({s.infeasible_fraction:.1%}) own p10/50/90 {s.normalized_p10:.2f}/"
                      f"{s.normalized_p50:.2f}/{s.normalized_p90:.2f} combined p10/50/90 "
                      f"{s.combined_p10:.3f}/{s.combined_p50:.3f}/{s.combined_p90:.3f}"
                      + (f" median speed vs {table.gpu_types[0]} {statistics.median(speeds):.2f}"
                         if not unordered else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
