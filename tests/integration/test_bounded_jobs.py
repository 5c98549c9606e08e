"""A user's bounded job (``from_collection``) with the hook FINISHES, with every output once.

The hook adds a Kafka feedback source to the job; unbounded, it would keep the job RUNNING
forever after the last record (and a BATCH job would be refused). The hook makes it bounded
when every source of the user's stream is (``pyflink_jobs.flink_ops.input_is_bounded``).
A BATCH-mode job is refused at build time with the reason (on these TaskManagers its blocking
shuffles ran out of network buffers and the job restarted until it failed; the plain job runs).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streamplace.cluster_health import heal_cluster
from streamplace.jars import flink_connector_jar
from streamplace.kafka_io import read_topic
from streamplace.topics import create_topics

JOB = Path(__file__).resolve().parent / "jobs" / "bounded_job.py"
RECORDS = 200


@pytest.mark.parametrize("mode, operator", [("streaming", "map"), ("streaming", "async")])
def test_a_bounded_hooked_job_finishes_with_every_output_once(stack_config, flink_cluster,
                                                               mode, operator):
    cfg = stack_config
    heal_cluster(flink_cluster)
    name = f"bounded-{mode}-{operator}"
    create_topics(cfg, [f"{name}-out", f"{name}-dlq", "feedback"])
    args = ["--bootstrap-servers", cfg.kafka.bootstrap_servers,
            "--connector-jar", str(flink_connector_jar(cfg)), "--output-topic", f"{name}-out",
            "--dead-letter-topic", f"{name}-dlq", "--records", str(RECORDS),
            "--operator", "map" if operator == "plain" else operator, "--job-name", name]
    job_id = flink_cluster.submit_python_job(JOB, args + (["--batch"] if mode == "batch" else [])
                                             + (["--plain"] if operator == "plain" else []))
    try:
        assert flink_cluster.wait_job_state(job_id, {"FINISHED"}, timeout_s=300) == "FINISHED"
    finally:
        if flink_cluster.job(job_id).get("state") not in ("FINISHED", "FAILED", "CANCELED"):
            flink_cluster.cancel_job(job_id)
    outputs = read_topic(cfg, f"{name}-out", None, expected=RECORDS, timeout_s=60,
                         settle_s=3).records
    got = Counter(r["value"].decode() for r in outputs)
    expected = Counter(json.dumps({"id": i, "text": f"RECORD {i}"}) for i in range(RECORDS))
    assert got == expected


@pytest.mark.parametrize("mode", ["BATCH", "AUTOMATIC"])
def test_a_batch_mode_job_is_refused_with_the_reason(mode):
    from pyflink.common import Types
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

    from pyflink_jobs.flink_ops import input_is_bounded
    from pyflink_jobs.hook import StreamplaceHook
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(getattr(RuntimeExecutionMode, mode))
    lines = env.from_collection(["a", "b"], type_info=Types.STRING())
    assert input_is_bounded(lines) and input_is_bounded(lines.map(str.upper))
    with pytest.raises(ValueError, match="Leave the runtime mode at STREAMING"):
        StreamplaceHook.create("127.0.0.1:9").apply(env, lines, str.upper,
                                                    output_type=Types.STRING())


def test_a_keyed_stream_is_refused_with_the_reason():
    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment

    from pyflink_jobs.hook import StreamplaceHook
    env = StreamExecutionEnvironment.get_execution_environment()
    keyed = env.from_collection(["a", "b"], type_info=Types.STRING()).key_by(lambda s: s)
    with pytest.raises(ValueError, match="Apply the hook to the stream before key_by"):
        StreamplaceHook.create("127.0.0.1:9").apply(env, keyed, str.upper,
                                                    output_type=Types.STRING())
