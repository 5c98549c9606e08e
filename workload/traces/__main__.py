"""Print what the trace readers find: ``python -m workload.traces [data_dir]``.

Reads every real file (or says it is missing and summarises the generated stand-in) and prints
the facts quoted in docs/data.md: row counts, GPU models, Gavel co-location statistics.

A data folder named as the argument or by ``$STREAMPLACE_DATA_DIR`` must exist and hold at least
one data-set folder (``workload.traces.datadir.check_named_data_dir``). Any problem with the
folder or a file (missing folder, malformed, unreadable or empty trace, a table without feasible
pairs) is one line on stderr and exit status 2, never a traceback.
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
)
from .datadir import check_named_data_dir, describe_data_error

USAGE = "usage: python -m workload.traces [DATA_DIR]"


class _Empty(ValueError):
    """A trace that was read but holds no rows (e.g. only its header line)."""


def _non_empty(trace):
    if len(trace) == 0:
        raise _Empty(f"{trace.source}: no rows (only a header?)")
    return trace


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n{__doc__.strip()}")
        return 0
    if len(argv) > 1:
        print(f"{USAGE}: one data folder at most, got {len(argv)} arguments", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    section = "data dir"
    try:
        root = check_named_data_dir(argv[0] if argv else None, option="the data folder argument")
        data_dir = root if argv else None
        print(f"data dir: {root}")
        section = _report(data_dir)
    except (ValueError, OSError, IndexError, statistics.StatisticsError) as exc:
        label = getattr(exc, "section", section)
        print(f"python -m workload.traces: {label}: {describe_data_error(exc)}", file=sys.stderr)
        return 2
    return 0


def _report(data_dir) -> str:
    section = ""
    try:
        for which in ("all", "gpu"):
            section = f"nodes[{which}]"
            nodes = _non_empty(load_or_generate_nodes(data_dir, which=which))
            models = ", ".join(f"{m or 'CPU-only'} {c}" for m, c in nodes.model_counts().items())
            print(f"nodes[{which}]: {len(nodes)} ({models})  <- {nodes.source}")
        for variant in ("default", "gpushare100", "gpuspec33"):
            section = f"pods[{variant}]"
            pods = _non_empty(load_or_generate_pods(data_dir, variant=variant))
            gpu_pods = [p for p in pods if p.num_gpu]
            print(f"pods[{variant}]: {len(pods)}, fractional GPU "
                  f"{sum(p.fractional_gpu for p in pods)}, GPU-type constrained "
                  f"{sum(bool(p.gpu_spec) for p in gpu_pods)}/{len(gpu_pods)},"
                  f" span {pods.arrivals()[-1] / 86400:.1f} days  <- {pods.source}")
        section = "genai"
        genai = _non_empty(load_or_generate_genai(data_dir))
        exec_ms = [r.exec_time_ms for r in genai if r.exec_time_ms is not None]
        median = f"{statistics.median(exec_ms) / 1000:.1f} s" if exec_ms else "-"
        print(f"genai: {len(genai)} requests over {genai.duration_s / 86400:.2f} days, median "
              f"exec {median}  <- {genai.source}")
        for kind in ("code", "conv"):
            section = f"azure[{kind}]"
            azure = _non_empty(load_or_generate_azure(data_dir, kind=kind))
            print(f"azure[{kind}]: {len(azure)} requests over {azure.duration_s:.0f} s  "
                  f"<- {azure.source}")
        for measurements in ("simulation", "physical"):
            section = f"colocation[{measurements}]"
            table = load_or_generate_colocation(data_dir, measurements=measurements)
            print(f"colocation[{measurements}] <- {table.source}")
            if not table.gpu_types:
                raise _Empty(f"{table.source}: no GPU types")
            reference = table.gpu_types[0]
            for gpu in table.gpu_types:
                section = f"colocation[{measurements}] {gpu} ({table.source})"
                _print_gpu(table, gpu, reference)
    except Exception as exc:
        exc.section = section   # which part of the report was being read
        raise
    return section


def _print_gpu(table, gpu: str, reference: str) -> None:
    jobs = table.jobs(gpu)
    speeds = [table.speed_factor(j, gpu, reference=reference) for j in jobs
              if table.isolated[reference].get(j)]
    for unordered in (False, True):
        s = table.stats(gpu, unordered=unordered)
        label = "unordered" if unordered else "ordered  "
        speed = ""
        if not unordered:
            speed = (f" median speed vs {reference} {statistics.median(speeds):.2f}" if speeds
                     else f" median speed vs {reference} - (no job measured on both)")
        print(f"  {gpu:20s} {label} jobs {len(jobs)} ({len({j.model for j in jobs})} "
              f"types) pairs {s.pairs} infeasible {s.infeasible} "
              f"({s.infeasible_fraction:.1%}) own p10/50/90 {s.normalized_p10:.2f}/"
              f"{s.normalized_p50:.2f}/{s.normalized_p90:.2f} combined p10/50/90 "
              f"{s.combined_p10:.3f}/{s.combined_p50:.3f}/{s.combined_p90:.3f}" + speed)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
