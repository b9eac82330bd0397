"""The contract every room shares: how records are encoded and checked, and how keys map to partitions.

Imports nothing of ikkai's but ``ikkai.errors`` and ``ikkai.resources``: the jobs, the outbox
emitter and sink, the control plane and the demo all build on it, never the other way round.
"""
