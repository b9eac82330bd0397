"""The PySpark jobs (enrich, infer), the transactional exactly-once sink, serialization, the model loader."""

from spark_jobs.serialization import RecordCodec, SchemaCatalog, SchemaError, SingleObjectCodec, default_codec
from spark_jobs.session import spark_session

__all__ = ["RecordCodec", "SchemaCatalog", "SchemaError", "SingleObjectCodec", "default_codec", "spark_session"]
