"""The PySpark jobs (enrich, infer), the transactional exactly-once sink, serialization, the model loader."""

from spark_jobs.session import spark_session

__all__ = ["spark_session"]
