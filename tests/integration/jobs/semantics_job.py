"""Jobs whose results depend on more than each record's output, run as plain scripts in this
process's mini cluster, with the hook or without it (``--mode``); prints the sorted results as
one JSON list on a line that starts with ``STREAMPLACE_OUTPUTS``.

- ``--job event-time``: records carry event times (watermarks from a bounded-out-of-orderness
  strategy); after the map, keyed 20 s tumbling event-time windows count and sum them. The hook
  must keep each record's timestamp and let no watermark pass a record it still holds, or the
  windows would differ (late records are dropped).
- ``--job table``: rows from the Table API (``to_data_stream``) through the map into named
  ``Row`` s, back into a table (``from_data_stream``) and a SQL query.

    python tests/integration/jobs/semantics_job.py --job event-time --mode hook \\
        --bootstrap-servers ... --connector-jar ...
"""

import argparse
import asyncio
import json
import os

from pyflink.common import Duration, Row, Types, WatermarkStrategy
from pyflink.common.time import Time
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import ProcessWindowFunction
from pyflink.datastream.window import TumblingEventTimeWindows

OUTPUTS_MARK = "STREAMPLACE_OUTPUTS "


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return json.loads(value)["ts"]


def enrich(line: str) -> str:
    record = json.loads(line)
    return json.dumps({"k": record["id"] % 3, "v": record["id"] * 2})


async def enrich_later(line: str) -> str:
    await asyncio.sleep(0.002)
    return enrich(line)


class CountAndSum(ProcessWindowFunction):
    def process(self, key, context, elements):
        values = [json.loads(e)["v"] for e in elements]
        yield json.dumps({"k": key, "start": context.window().start, "n": len(values),
                          "sum": sum(values)})


def score(row):
    return Row(name=row["name"], total=row["qty"] * row["price"], big=row["qty"] > 5)


def through(env, stream, mode, operator, output_type, bootstrap_servers):
    """``stream.map(operator)``, or the same through the hook."""
    if mode == "plain":
        return stream.map(operator, output_type=output_type)
    from pyflink_jobs.hook import StreamplaceHook
    return StreamplaceHook.create(bootstrap_servers).apply(env, stream, operator,
                                                           output_type=output_type)


def event_time(env, mode, records, bootstrap_servers):
    lines = env.from_collection([json.dumps({"id": i, "ts": 1000 * i}) for i in range(records)],
                                type_info=Types.STRING())
    lines = lines.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
        .with_timestamp_assigner(EventTime()))
    operator = enrich_later if mode == "hook-async" else enrich
    out = through(env, lines, "plain" if mode == "plain" else "hook", operator, Types.STRING(),
                  bootstrap_servers)
    windows = (out.key_by(lambda s: json.loads(s)["k"], key_type=Types.INT())
               .window(TumblingEventTimeWindows.of(Time.seconds(20)))
               .process(CountAndSum(), output_type=Types.STRING()))
    with windows.execute_and_collect() as results:
        return sorted(results)


def table(env, mode, records, bootstrap_servers):
    from pyflink.table import StreamTableEnvironment
    t_env = StreamTableEnvironment.create(env)
    rows = t_env.from_elements([(f"item-{i}", i % 9, 1.5 * i) for i in range(records)],
                               ["name", "qty", "price"])
    out_type = Types.ROW_NAMED(["name", "total", "big"],
                               [Types.STRING(), Types.DOUBLE(), Types.BOOLEAN()])
    out = through(env, t_env.to_data_stream(rows), mode, score, out_type, bootstrap_servers)
    t_env.create_temporary_view("scored", t_env.from_data_stream(out))
    with t_env.execute_sql("SELECT name, total, big FROM scored WHERE total >= 0").collect() as it:
        return sorted(str(row) for row in it)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", choices=["event-time", "table"], required=True)
    parser.add_argument("--mode", choices=["plain", "hook", "hook-async"], default="plain")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--records", type=int, default=300)
    args = parser.parse_args()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.set_parallelism(2)
    job = event_time if args.job == "event-time" else table
    outputs = job(env, args.mode, args.records, args.bootstrap_servers)
    print(OUTPUTS_MARK + json.dumps(outputs), flush=True)


if __name__ == "__main__":
    main()
