"""The continuous jobs' trigger: the documented default, the accepted spellings, a clear refusal."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ikkai.errors import ConfigError
from spark_jobs.enrich import job as enrich
from spark_jobs.infer import job as infer
from spark_jobs.options import DEFAULT_TRIGGER_INTERVAL, stream_trigger, trigger_interval_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250 milliseconds", 250), ("250ms", 250), ("1s", 1000), ("1.5 seconds", 1500), ("2 min", 120_000), ("0ms", 0)],
)
def test_an_interval_is_read_in_its_unit(text: str, ms: float) -> None:
    assert trigger_interval_ms(text) == ms


@pytest.mark.parametrize("text", ["", "fast", "10", "5 hours", "-1s", "0x1s"])
def test_a_bad_interval_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ConfigError) as raised:
        trigger_interval_ms(text)
    assert "--trigger-interval" in str(raised.value) and "250ms" in str(raised.value)


def test_continuous_runs_every_interval_and_a_drain_stops_when_caught_up() -> None:
    assert stream_trigger(available_now=True) == {"availableNow": True}
    assert stream_trigger(available_now=False) == {"processingTime": "250 milliseconds"}
    assert stream_trigger(available_now=False, interval="1s") == {"processingTime": "1000 milliseconds"}
    assert stream_trigger(available_now=False, interval="0ms") == {"processingTime": "0 milliseconds"}  # back to back
    assert trigger_interval_ms(DEFAULT_TRIGGER_INTERVAL) < 1000  # p99 at a fixed load needs the wait well under 1 s


@pytest.mark.parametrize("job", [infer.main, enrich.main])
def test_a_bad_interval_is_refused_before_spark_starts(job: object) -> None:
    result = CliRunner().invoke(job, ["--continuous", "--trigger-interval", "soon"])  # type: ignore[arg-type]
    assert result.exit_code == 2
    assert "--trigger-interval" in result.output and "not an interval" in result.output
