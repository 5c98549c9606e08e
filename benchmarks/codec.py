"""Avro codec speed: fastavro (what streamplace uses) versus the reference ``avro`` package, on a
TaskEvent, encode and decode, microseconds per record on one thread.

    python -m benchmarks.codec [--quick]

Writes benchmarks/results/codec.json and codec.png.
"""

from __future__ import annotations

import argparse
import io
import statistics
import timeit
from importlib import resources

from benchmarks._common import RESULTS, description, write_result
from workload.codec import HEADER_SIZE, decode, encode

RECORD = {"task_id": "task-0000042", "app_id": "face_recognition", "input_size": 36000,
          "submitted_at_ms": 1764500000000, "source": "alibaba-genai", "expected_work_ms": 812.5,
          "attributes": {"model": "sd-1.5"}}


def _per_record_us(fn, number: int, repeats: int) -> list[float]:
    return [t / number * 1e6 for t in timeit.repeat(fn, number=number, repeat=repeats)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    number, repeats = (5_000, 3) if args.quick else (20_000, 7)

    import avro.io
    import avro.schema
    schema_text = (resources.files("workload") / "schemas" / "task_event.avsc").read_text()
    schema = avro.schema.parse(schema_text)
    reader, writer = avro.io.DatumReader(schema, schema), avro.io.DatumWriter(schema)
    data = encode("TaskEvent", RECORD)
    body = data[HEADER_SIZE:]

    def avro_decode():
        return reader.read(avro.io.BinaryDecoder(io.BytesIO(body)))

    def avro_encode():
        buffer = io.BytesIO()
        writer.write(RECORD, avro.io.BinaryEncoder(buffer))
        return buffer.getvalue()

    assert avro_decode() == RECORD and avro_encode() == body  # same bytes, same record
    runs = {
        # fastavro numbers include our 10-byte header check and fingerprint lookup.
        "fastavro decode": _per_record_us(lambda: decode("TaskEvent", data), number, repeats),
        "fastavro encode": _per_record_us(lambda: encode("TaskEvent", RECORD), number, repeats),
        "avro decode": _per_record_us(avro_decode, number, repeats),
        "avro encode": _per_record_us(avro_encode, number, repeats),
    }
    summary = {name: {"median_us": round(statistics.median(v), 2), "min_us": round(min(v), 2),
                      "runs_us": [round(x, 2) for x in v]} for name, v in runs.items()}
    path = write_result("codec", {"record": "TaskEvent", "number": number, "repeats": repeats,
                                  "results": summary})

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3))
    names = list(summary)
    ax.barh(names, [summary[n]["median_us"] for n in names],
            color=["tab:blue", "tab:blue", "tab:gray", "tab:gray"])
    ax.set_xlabel("µs per TaskEvent (median of runs, one thread)")
    ax.set_title("Avro codec: fastavro vs avro")
    fig.tight_layout()
    fig.savefig(RESULTS / "codec.png", dpi=120)
    for name in names:
        print(f"{name:16s} {summary[name]['median_us']:7.2f} µs")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
