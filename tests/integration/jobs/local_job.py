"""A user's job run as a plain script (``python local_job.py``), in this process's mini cluster,
as PyFlink's documentation runs its examples: a bounded collection through the hook, collected
back with ``execute_and_collect``. Prints the outputs as one JSON list on the last line.

    python tests/integration/jobs/local_job.py --bootstrap-servers ... --connector-jar ... \\
        [--operator async|picky] [--twice] [--records 60]
"""

import argparse
import asyncio
import json
import os

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment

#: The line of stdout that carries the outputs starts with this.
OUTPUTS_MARK = "STREAMPLACE_OUTPUTS "


def shout(line: str) -> str:
    record = json.loads(line)
    return json.dumps({"id": record["id"], "text": record["text"].upper()})


async def shout_later(line: str) -> str:
    await asyncio.sleep(0.001)
    return shout(line)


def picky(line: str) -> str:
    """shout, raising on every 5th record, and giving an int (not the job's STRING) on every
    7th: a plain map would fail the job on that output in PyFlink's coder."""
    number = json.loads(line)["id"]
    if number % 5 == 4:
        raise ValueError(f"record {line} is not wanted")
    if number % 7 == 6:
        return number
    return shout(line)


OPERATORS = {"map": shout, "async": shout_later, "picky": picky}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--records", type=int, default=60)
    parser.add_argument("--operator", choices=sorted(OPERATORS), default="map")
    parser.add_argument("--twice", action="store_true",
                        help="a second hook.apply on the first one's outputs (exclaim)")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    lines = env.from_collection([json.dumps({"id": i, "text": f"record {i}"})
                                 for i in range(args.records)], type_info=Types.STRING())

    from pyflink_jobs.hook import StreamplaceHook
    hook = StreamplaceHook.create(args.bootstrap_servers)
    out = hook.apply(env, lines, OPERATORS[args.operator], output_type=Types.STRING())
    if args.twice:
        out = StreamplaceHook.create(args.bootstrap_servers).apply(
            env, out, lambda s: s + "!", output_type=Types.STRING())

    with out.execute_and_collect() as results:
        outputs = list(results)
    # marked: the mini cluster's JVM may print to stdout after it (a stack trace on shutdown)
    print(OUTPUTS_MARK + json.dumps(outputs), flush=True)


if __name__ == "__main__":
    main()
