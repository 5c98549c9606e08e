"""Dynamic batching on versus off for a user's operator: example (b), the text classifier.

    python -m benchmarks.operator_batching [--quick] [--records 3000] [--rounds 5]
        [--workers N] [--in-flight N]

The operator is ``examples/text_inference``'s pipeline, exactly as the hooked job hands it over
(``[tokenize, TextNet, to_label]``: CPU steps and a torch model stage that batches up to 32
reviews). It runs in :class:`interference.executor.OperatorExecutor` (the executor inside every
hooked TaskManager) with batching on and off, in alternating order, each round a backlog of
``--records`` reviews submitted at once: records per second, p50/p99 latency (submission to
outcome), the mean batch the model stage got, and, on a CUDA host, the GPU's utilisation from
NVML sampled every 0.1 s. Outputs are checked equal between the two modes (batching must not
change what the operator computes).

Writes ``benchmarks/results/operator_batching.json`` and ``.png`` (or under ``$OUT`` when set:
the GPU check writes there).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import threading
import time
from pathlib import Path

from benchmarks._common import RESULTS, description, git_commit, machine
from benchmarks.flink_e2e import confidence

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "text_inference" / "plain_job.py"
WORDS = ("the market rallied as the team won a cup while science labs found new stars and "
         "world leaders met to talk trade goals").split()


def example_operator():
    """The hooked job's operator, loaded from the example file (no Flink needed)."""
    from workload.operators import as_operator
    spec = importlib.util.spec_from_file_location("text_inference_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return as_operator([module.tokenize, module.TextNet, module.to_label])


def reviews(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [json.dumps({"id": i, "text": " ".join(rng.choices(WORDS, k=rng.randrange(3, 60)))})
            for i in range(count)]


def one_run(batching: bool, records: list[str], workers: int, in_flight: int = 0) -> dict:
    from interference.executor import OperatorExecutor, OperatorExecutorSettings
    from interference.executor.telemetry import NodeTelemetry
    settings = OperatorExecutorSettings(cpu_workers=workers, batching=batching,
                                        max_in_flight=in_flight or len(records))
    # in_flight > 0: at most that many records submitted and not finished, as Flink's async
    # operator allows (the hook's executor_capacity); 0: the whole backlog at once
    window = threading.Semaphore(in_flight) if in_flight else None
    executor = OperatorExecutor(example_operator(), settings)
    telemetry, samples, stop = NodeTelemetry(), [], threading.Event()

    def sample():
        while not stop.wait(0.1):
            samples.append(telemetry.sample()["gpu_util"])

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        executor.submit("warm-up", records[0], len(records[0])).result(120)
        sampler.start()
        started = time.perf_counter()
        submitted, finished = {}, {}
        futures = []

        def done(i):
            def callback(_future):
                finished[i] = time.perf_counter()  # when it finished, not when it was read
                if window is not None:
                    window.release()
            return callback

        for i, record in enumerate(records):
            if window is not None:
                window.acquire()
            submitted[i] = time.perf_counter()
            future = executor.submit(f"r{i}", record, len(record))
            future.add_done_callback(done(i))
            futures.append(future)
        outcomes = [future.result(600) for future in futures]
        while len(finished) < len(futures):  # a callback runs just after result() wakes
            time.sleep(0.001)
        latencies = [(finished[i] - submitted[i]) * 1000.0 for i in range(len(futures))]
        elapsed = time.perf_counter() - started
        report = executor.batch_report()
    finally:
        stop.set()
        executor.close()
        telemetry.close()
    failed = [o for o in outcomes if o.status != "OK"]
    model = next((kinds for stage, kinds in report.items() if stage == "TextNet"), {})
    ordered = sorted(latencies)
    return {"records_per_s": len(records) / elapsed, "seconds": elapsed,
            "p50_ms": ordered[len(ordered) // 2],
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "failed": len(failed), "model_stage": model,
            "gpu_util_mean": statistics.fmean(samples) if samples else None,
            "outputs": [o.outputs for o in outcomes]}


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = list(summary)
    for ax, key, title in ((axes[0], "records_per_s", "records / s"),
                           (axes[1], "p99_ms", "p99 latency (ms)")):
        means = [summary[k][key]["mean"] for k in labels]
        errs = [[m - summary[k][key]["ci95"][0] for k, m in zip(labels, means)],
                [summary[k][key]["ci95"][1] - m for k, m in zip(labels, means)]]
        ax.bar(labels, means, yerr=errs, capsize=6, color=["#4c72b0", "#c44e52"])
        ax.set_title(title)
    fig.suptitle("text classifier (examples/text_inference) in the executor: batching on / off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="2 rounds of 800 records")
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0, help="CPU workers (0: all cores)")
    parser.add_argument("--in-flight", type=int, default=0,
                        help="at most this many records in flight, as in the hooked job's "
                             "async operator (0: the whole backlog at once); writes "
                             "operator_batching_in_flight_<N>.json")
    args = parser.parse_args(argv)
    count, rounds = (800, 2) if args.quick else (args.records, args.rounds)
    records = reviews(count, seed=7)
    runs: dict[str, list[dict]] = {"batching on": [], "batching off": []}
    reference = None
    for r in range(rounds):
        order = [True, False] if r % 2 == 0 else [False, True]  # alternating order
        for batching in order:
            result = one_run(batching, records, args.workers, args.in_flight)
            outputs = result.pop("outputs")
            reference = reference or outputs
            result["outputs_equal_first_run"] = outputs == reference
            label = "batching on" if batching else "batching off"
            runs[label].append(result)
            print(f"round {r + 1}/{rounds} {label:13s} {result['records_per_s']:8.1f} rec/s  "
                  f"p99 {result['p99_ms']:8.1f} ms  model batch "
                  f"{result['model_stage'].get('cpu', result['model_stage'].get('gpu', {}))}",
                  flush=True)
    summary = {label: {key: confidence([run[key] for run in rows])
                       for key in ("records_per_s", "p50_ms", "p99_ms")}
               for label, rows in runs.items()}
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    name = f"operator_batching_in_flight_{args.in_flight}" if args.in_flight else \
        "operator_batching"
    document = {"benchmark": name, "git_commit": git_commit(),
                "machine": machine(), "records": count, "rounds": rounds,
                "in_flight": args.in_flight or None, "workers": args.workers or None,
                "summary": summary, "runs": runs,
                "outputs_equal": all(run["outputs_equal_first_run"]
                                     for rows in runs.values() for run in rows)}
    (out / f"{name}.json").write_text(json.dumps(document, indent=2, default=float))
    plot(summary, out / f"{name}.png")
    on, off = summary["batching on"], summary["batching off"]
    print(f"batching on {on['records_per_s']['mean']:.1f} rec/s vs off "
          f"{off['records_per_s']['mean']:.1f} ({on['records_per_s']['mean'] / off['records_per_s']['mean']:.2f}x); "
          f"p99 {on['p99_ms']['mean']:.1f} vs {off['p99_ms']['mean']:.1f} ms; outputs equal: "
          f"{document['outputs_equal']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
