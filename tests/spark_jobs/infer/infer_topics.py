"""The infer tests' output topics: fresh decisions, outbox and DLQ topics for one input, created with its layout."""

from __future__ import annotations

from demo.infer_process import InferTopics
from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import create_topic, unique


def outputs(cluster: KafkaContext, input_topic: str, partitions: int = 2) -> InferTopics:
    name = unique("t")
    topics = InferTopics(input_topic, f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, partitions)
    return topics
