"""What streamplace's own Python costs per record in a hooked job, measured outside Flink.

The hook's overhead benchmark (``benchmarks/flink_e2e_examples.py --overhead``) measures the
whole job; this one times streamplace's own per-record Python on the same trivial operator
(``passthrough``: the record itself) and the same light JSON records, with no Flink around it:

- router: ``RouterFunction.process_element`` (read the record, decide, build the RoutedRecord);
- pickle / unpickle: the RoutedRecord across the router -> executor hop (cloudpickle, as
  PyFlink's pickled type information does);
- executor: ``DirectOperatorFunction.process_element`` (run the operator inline, report its
  timing in the node's feedback);
- plain: the operator alone, as the job without the hook calls it.

The rest of the hook's extra CPU per record in a real job is PyFlink's (a second Python
operator crossing and an extra shuffle). The executor's feedback producer is a stand-in that
sends nothing (feedback is built per interval, not per record): no broker is needed.

    python -m benchmarks.hook_profile [--records 20000]

Writes benchmarks/results/hook_profile.json.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time

from benchmarks._common import description, write_result

#: where the hook would find Kafka; nothing connects to it (the producer is a stand-in)
NOWHERE = "127.0.0.1:9"


def passthrough(line: str) -> str:
    return line


class _NoProducer:
    """confluent_kafka.Producer's surface, sending nothing."""

    def __init__(self, config: dict):
        self.config = config

    def produce(self, *args, **kwargs) -> None:
        pass

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


class _Metrics:
    def gauge(self, *args, **kwargs) -> None:
        pass


class _RuntimeContext:
    def get_index_of_this_subtask(self) -> int:
        return 0

    def get_metrics_group(self) -> _Metrics:
        return _Metrics()


class _BroadcastContext:
    def get_broadcast_state(self, descriptor):
        return {}


def _per_record_us(function, items) -> float:
    started = time.perf_counter()
    for item in items:
        function(item)
    return 1e6 * (time.perf_counter() - started) / len(items)


def measure(records: int) -> dict:
    import cloudpickle

    from pyflink_jobs.hook import StreamplaceHook
    from pyflink_jobs.operator_function import DirectOperatorFunction
    from pyflink_jobs.router_function import OperatorRecords, RouterFunction
    from workload.operators import as_operator
    hook = StreamplaceHook.create(NOWHERE)
    operator = as_operator(passthrough)
    hook.nodes = hook.settings.resolved_nodes()
    router = RouterFunction(hook.router_settings(),
                            OperatorRecords(operator, hook.task_limits(user_records=True)))
    router.open(_RuntimeContext())
    executor = DirectOperatorFunction("tm_a", operator, hook.executor_settings(1, "tm_a"))
    import confluent_kafka
    real, confluent_kafka.Producer = confluent_kafka.Producer, _NoProducer
    try:
        executor.open(_RuntimeContext())
    finally:
        confluent_kafka.Producer = real
    lines = [json.dumps({"n": i, "r": 0}) for i in range(records)]
    context = _BroadcastContext()
    routed = []
    try:
        router_us = _per_record_us(
            lambda line: routed.append(list(router.process_element(line, context))[0][1]), lines)
        blobs = []
        pickle_us = _per_record_us(lambda r: blobs.append(cloudpickle.dumps(r)), routed)
        back = []
        unpickle_us = _per_record_us(lambda b: back.append(pickle.loads(b)), blobs)
        executor_us = _per_record_us(lambda r: list(executor.process_element(r, None)), back)
        plain_us = _per_record_us(passthrough, lines)
    finally:
        executor.close()
        router.close()
    return {"router_us": router_us, "pickle_us": pickle_us, "unpickle_us": unpickle_us,
            "executor_us": executor_us, "plain_us": plain_us,
            "streamplace_us": router_us + pickle_us + unpickle_us + executor_us,
            "routed_record_bytes": len(blobs[0]), **measure_colocated(hook, operator, lines)}


def measure_colocated(hook, operator, lines: list[str]) -> dict:
    """routing="colocated": a router on tm_a that keeps the light records and runs them itself
    (``colocated_us``: ``process_element`` to the outputs, all of it streamplace's), once the
    work of ``passthrough`` on tm_a is measured (trusted)."""
    import os

    from pyflink_jobs.inline_executor import InlineExecutor
    from pyflink_jobs.router_function import OperatorRecords, RouterFunction
    import confluent_kafka
    inline = InlineExecutor(operator, hook.executor_settings(1, ""), output_tag=None)
    router = RouterFunction(hook.router_settings(),
                            OperatorRecords(operator, hook.task_limits(user_records=True)),
                            inline=inline)
    real, confluent_kafka.Producer = confluent_kafka.Producer, _NoProducer
    previous = os.environ.get("STREAMPLACE_NODE_ID")
    os.environ["STREAMPLACE_NODE_ID"] = "tm_a"
    try:
        router.open(_RuntimeContext())
    finally:
        confluent_kafka.Producer = real
        if previous is None:
            os.environ.pop("STREAMPLACE_NODE_ID")
        else:
            os.environ["STREAMPLACE_NODE_ID"] = previous
    task_type = operator.name
    for _ in range(8):  # what the node's feedback would have taught it: light here
        router.router.costs.observe("tm_a", task_type, 20, 2e-6)
    context = _BroadcastContext()
    kept_before = router.router.routed["tm_a"]
    passes = 5
    try:
        # the least of 5 passes: this 2-core machine stops threads often (decision_latency)
        colocated_us = min(_per_record_us(
            lambda line: list(router.process_element(line, context)), lines) for _ in range(passes))
    finally:
        router.close()
    return {"colocated_us": colocated_us,
            "colocated_kept_share": (router.router.routed["tm_a"] - kept_before)
            / (passes * len(lines))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args(argv)
    row = measure(args.records)
    path = write_result("hook_profile", {"records": args.records, **row})
    print(f"per record: router {row['router_us']:.1f} us, pickle {row['pickle_us']:.1f} us "
          f"({row['routed_record_bytes']} B), unpickle {row['unpickle_us']:.1f} us, executor "
          f"{row['executor_us']:.1f} us; streamplace in all {row['streamplace_us']:.1f} us "
          f"against {row['plain_us']:.2f} us for the operator alone; colocated (a router "
          f"running what it keeps): {row['colocated_us']:.1f} us, "
          f"{100 * row['colocated_kept_share']:.0f}% kept; wrote {path}")


if __name__ == "__main__":
    main()
