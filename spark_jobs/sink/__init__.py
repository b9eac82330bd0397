"""The exactly-once sink's room: Spark micro-batches to Kafka transactions, and what each one covered.

``transactional_sink`` writes a batch per output partition (``partition_transactions``, run by the
Spark tasks of ``write_tasks`` or by the executor's writer) in one Kafka transaction with its commit
marker (``commit_markers``), by producers a ``producer_pool`` keeps, as ``config.SinkConfig`` says;
``claim_log`` decides at each start
which query writes an output (the claim log), ``query_handover`` and ``input_identity`` keep a change
(a handover, a recreated input) exactly-once; ``kafka_errors``
classifies what Kafka answers, and ``dead_letters`` sets aside what Kafka refuses;
``ikkai.contract.partition_ends`` reads a partition to its committed end. ``query_start`` is the
sink's side of a query's start, in one pass: the input by id, a rebase on a recreated input, the
writer and its checks and claim (``prepare_sink``); ``stream_writer`` attaches the prepared writer as
a Python data source's stream writer instead of ``foreachBatch``, when asked.
"""

from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.transactional_sink import AtLeastOnceBatchWriter, TransactionalBatchWriter

__all__ = ["AtLeastOnceBatchWriter", "SinkConfig", "TransactionalBatchWriter"]
