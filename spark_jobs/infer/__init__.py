"""The infer job's room: ``events.<type>`` to decisions and outbox requests, in one transaction per partition.

``python -m spark_jobs.infer`` runs it (``job``); ``fraud_decisions`` turns a batch of events into
decisions and outbox requests with the model (``spark_jobs.model``), and ``decision_compare``
compares a shadow model's decisions with the live ones (``ikkai jobs compare``).
"""

__all__: list[str] = []
