"""What the operator page reads from Kafka: the flow of the pipeline's topics and the exactly-once view of a cluster.

``flow`` samples the ends of the pipeline's topics; ``health`` samples the exactly-once health of the queries (their
commit markers and open transactions) and, within the same sample, the readers below it: ``consumer_lag``,
``dead_letter_reasons``, ``reconciliation`` (of the outbox) and ``event_decisions``, whose delays ``latency``
buckets. Every read is bounded (``deploy.kafka_windows``) and read_committed. The readers know nothing of HTTP or of
the Connect control plane; the page (``deploy.serve.page``) calls them, one reader of each kind per environment.
"""
