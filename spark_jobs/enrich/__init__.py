"""The enrich job's room: raw ``ingest.<endpoint>`` lines to Avro ``events.<type>``, bad lines to ``dlq.enrich``.

``python -m spark_jobs.enrich`` runs it (``job``). Parsing and validation (``parse``), the reasons of
dead letters (``reasons``), the records each batch writes (``records``), master data as of event
time (``asof``, ``master_data``) and the per-key "keep the newer event time" rule (``dedupe``) each
live in a module of their own; the transform spec is ``transforms.yaml``.
"""

__all__: list[str] = []
