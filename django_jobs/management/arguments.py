"""How the management commands read their arguments."""

from __future__ import annotations

import re
from datetime import timedelta

DURATION_PART = re.compile(r"([0-9]+)([wdhms])")
UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION_EXAMPLES = "e.g. 7d, 12h, 30m, 45s, 2w or 1d12h"


def parse_duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w``, or parts together (``1d12h``); above zero.

    :class:`ValueError` with the reason for anything else.
    """
    spec = text.strip().lower()
    parts = DURATION_PART.findall(spec)
    if not spec or "".join(number + unit for number, unit in parts) != spec:
        raise ValueError(
            f"not a duration: {text!r}; give whole numbers with a unit (w, d, h, m, s), "
            f"{DURATION_EXAMPLES}"
        )
    try:
        duration = timedelta(seconds=sum(int(n) * UNIT_SECONDS[unit] for n, unit in parts))
    except OverflowError:
        raise ValueError(f"duration too long: {text!r}") from None
    if duration <= timedelta(0):
        raise ValueError(f"a duration must be more than zero, got {text!r}")
    return duration
