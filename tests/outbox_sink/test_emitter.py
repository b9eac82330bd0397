"""OutboxEmitter's mode rules, without a broker: own output only inside a transaction of a transactional emitter."""

from __future__ import annotations

import pytest

from outbox_sink import OutboxDeliveryError, OutboxEmitter

NOWHERE = "127.0.0.1:9"  # nothing listens: these checks fail before anything is sent


def test_an_idempotent_emitter_refuses_own_output_and_transactions() -> None:
    emitter = OutboxEmitter(NOWHERE, producer_config={"log_level": 0})  # quiet: nothing listens there
    assert not emitter.transactional
    with pytest.raises(OutboxDeliveryError) as caught:
        emitter.produce("decisions.fraud", b"pay-1", b"x")
    assert caught.value.fatal
    with pytest.raises(OutboxDeliveryError), emitter.transaction():
        pass
    emitter.close()
