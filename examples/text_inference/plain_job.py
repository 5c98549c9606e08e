"""A plain PyFlink job: ML inference on text. Reviews in from Kafka, a torch classifier, labels out.

The model (:class:`TextNet`: hashed tokens -> 2-layer transformer encoder -> 4 topics) is defined in code
with fixed-seed random weights, so the plain and the hooked job load the very same weights.
``hooked_job.py`` beside it is the same job with the streamplace hook, where the model runs as a
batched stage (up to 32 reviews per call, on a GPU when the TaskManager has one); the difference
is three lines::

    diff examples/text_inference/plain_job.py examples/text_inference/hooked_job.py

Run::

    flink run -d -py examples/text_inference/plain_job.py -- --bootstrap-servers 127.0.0.1:9092 \\
        --connector-jar .streamplace/jars/flink/flink-sql-connector-kafka-5.0.0-2.2.jar
"""

import argparse
import hashlib
import json
import os
import re

import torch
from pyflink.common import SimpleStringSchema, Types, WatermarkStrategy
from pyflink.datastream import CheckpointingMode, MapFunction, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer,
                                                 KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)

VOCABULARY, TOKENS = 8192, 64
TOPICS = ["sports", "business", "science", "world"]


def tokenize(line: str) -> list:
    """A review (JSON) -> TOKENS hashed word ids (0 pads)."""
    words = re.findall(r"[a-z']+", json.loads(line)["text"].lower())[:TOKENS]
    ids = [1 + int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "big")
           % (VOCABULARY - 1) for w in words]
    return ids + [0] * (TOKENS - len(ids))


class TextNet(torch.nn.Module):
    """Word embeddings -> a 2-layer transformer encoder -> mean -> topic logits; fixed-seed
    random weights (about 2 ms a review on one CPU core, 0.5 ms in batches of 32)."""

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(2021)
            self.embed = torch.nn.Embedding(VOCABULARY, 128, padding_idx=0)
            layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(128, len(TOPICS))

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


def to_label(line: str, logits: list) -> str:
    """The review's id and its topic."""
    best = max(range(len(logits)), key=logits.__getitem__)
    return json.dumps({"id": json.loads(line)["id"], "topic": TOPICS[best]})


class Classify(MapFunction):
    """One review at a time: tokenize, run the model, label."""

    def open(self, runtime_context):
        torch.set_num_threads(1)
        self.model = TextNet().eval()

    def map(self, line):
        with torch.inference_mode():
            logits = self.model(torch.as_tensor([tokenize(line)]))[0].tolist()
        return to_label(line, logits)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--connector-jar", required=True)
    parser.add_argument("--input-topic", default="reviews")
    parser.add_argument("--output-topic", default="review-topics")
    parser.add_argument("--dead-letter-topic", default="dead-letter")  # used with the hook
    parser.add_argument("--job-name", default="classify-reviews")
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_jars(f"file://{os.path.abspath(args.connector_jar)}")
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics(args.input_topic).set_group_id(args.job_name)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_property("isolation.level", "read_committed")
              .set_value_only_deserializer(SimpleStringSchema()).build())
    reviews = env.from_source(source, WatermarkStrategy.no_watermarks(), "reviews").uid("reviews")

    topics = reviews.map(Classify(), output_type=Types.STRING()).uid("classify")

    topics.sink_to(KafkaSink.builder().set_bootstrap_servers(args.bootstrap_servers)
                   .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                          .set_topic(args.output_topic)
                                          .set_value_serialization_schema(SimpleStringSchema())
                                          .build())
                   .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                   .set_transactional_id_prefix(args.job_name)
                   .set_property("transaction.timeout.ms", "600000").build()).uid("sink")
    env.execute(args.job_name)


if __name__ == "__main__":
    main()
