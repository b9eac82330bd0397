"""The kit for the demo, the benchmarks and the tests, beside the product's path: ``ikkai stack``, the runtimes and
the control plane never import it (a lint-imports contract in pyproject.toml holds it).

- ``chaos``: ``ChaosStack``, which broker or executor to kill and when the cluster has healed;
- ``leaders``: which broker leads a partition or coordinates a transaction (asked of the brokers);
- ``topic_io``: writing to and reading from topics as a fresh client sees them: unique names, topic creation,
  Avro payments on their key's partition, a read_committed (or read_uncommitted) read to the end, and
  transactions to read.

Import each from its module; this package re-exports nothing, so importing ``stack.kit`` loads none of them.
"""
