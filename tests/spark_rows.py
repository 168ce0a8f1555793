"""Small helpers for the Spark tests: rows of walfs DataFrames as plain Python values."""

from __future__ import annotations

from typing import Any


def values(rows: list[Any]) -> list[bytes]:
    """The `value` column of collected rows, as bytes."""
    return [bytes(r["value"]) for r in rows]


def offsets_of(df: Any, topic: str, partition: int = 0) -> list[int]:
    """Sorted offsets of one stream in a DataFrame of walfs rows."""
    rows = df.where(f"topic = '{topic}' AND partition = {partition}").select("offset").collect()
    return sorted(r["offset"] for r in rows)
