"""The PySpark jobs (enrich, infer), the transactional exactly-once sink, serialization, the model loader."""

from ikkai.contract.codec import RecordCodec, SchemaCatalog, SchemaError, SingleObjectCodec, default_codec
from spark_jobs.session import spark_session
from spark_jobs.sink.transactional_sink import AtLeastOnceBatchWriter, SinkConfig, TransactionalBatchWriter

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
