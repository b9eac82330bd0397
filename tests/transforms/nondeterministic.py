"""A deliberately non-deterministic transform, registered only when this module is imported.

``ikkai transforms check --module tests.transforms.nondeterministic`` must fail on it: it stamps
every row with the wall clock, which a replay would change. Never import this from other tests;
the registry is process-wide.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from transforms import Example, OutputColumn, register


@register(
    examples=[
        Example(
            params={"output": "processed_at"},
            schema="payment_id string",
            rows=[{"payment_id": "p1"}],
            expected=[{"payment_id": "p1", "processed_at": None}],
        )
    ]
)
def stamp_processing_time(df: DataFrame, *, output: OutputColumn) -> DataFrame:
    """Add the processing time: exactly what a deterministic pipeline must never do."""
    return df.withColumn(output, F.current_timestamp())
