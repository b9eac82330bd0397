"""The PySpark jobs: the shell here, the exactly-once sink (sink/), the jobs (enrich/, infer/), the model."""

from ikkai.contract.codec import RecordCodec, SchemaCatalog, SchemaError, SingleObjectCodec, default_codec
from spark_jobs.session import spark_session
from spark_jobs.sink import AtLeastOnceBatchWriter, SinkConfig, TransactionalBatchWriter

__all__ = [
    "AtLeastOnceBatchWriter",
    "RecordCodec",
    "SchemaCatalog",
    "SchemaError",
    "SingleObjectCodec",
    "SinkConfig",
    "TransactionalBatchWriter",
    "default_codec",
    "spark_session",
]
