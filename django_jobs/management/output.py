"""How the management commands print: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..display import format_age, format_time

__all__ = ["format_age", "format_duration", "format_time"]


def shorten(text: str, width: int = 60) -> str:
    """The first line of ``text``, cut to ``width`` characters."""
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    if len(line) > width or len(lines) > 1:
        return line[: width - 1] + "…"
    return line


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers aligned right."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [
        max([len(header), *(len(row[i]) for row in cells)]) for i, header in enumerate(headers)
    ]
    numeric = [
        bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        padded = (
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        )
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def fields(pairs: Mapping[str, Any]) -> str:
    """``key: value`` lines, the values aligned."""
    width = max(len(key) for key in pairs)
    return "\n".join(f"{key + ':':<{width + 1}} {value}" for key, value in pairs.items())


def to_json(document: Any) -> str:
    """One JSON document; times in ISO 8601 with their offset."""
    return json.dumps(document, indent=2, default=json_default, ensure_ascii=False)


def json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def format_duration(duration: timedelta | None) -> str:
    """``7d``, ``1d12h``, ``30m``, ``45s``: the largest whole units, none of them zero."""
    if duration is None:
        return "-"
    seconds = int(duration.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
