"""ikkai (一回, "once"): exactly-once ML inference on Kafka, Kafka Connect and Spark.

This package holds only what every component shares: the version and the root error.
The components live in their own top-level packages (deploy, stack, connectors, spark_jobs,
transforms, outbox_sink); see docs/architecture.md.
"""

from ikkai.errors import ConfigError, IkkaiError, PrerequisiteError

__version__ = "0.1.0"

__all__ = ["ConfigError", "IkkaiError", "PrerequisiteError", "__version__"]
