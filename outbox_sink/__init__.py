"""The outbox contract, the emitter services use, and the outbox sink that runs inside Kafka Connect.

Built by the outbox issue (#6); empty until then.
"""
