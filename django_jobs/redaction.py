"""Keep payload values out of stored errors and logs (best effort).

Every string and number of the payload is replaced with ``***`` in an error
message: a value of 4 or more characters wherever it stands, a shorter one
only as a whole word. Keys are kept: they name fields, they do not hold them.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
SHORT = 4


def payload_values(payload: Any) -> set[str]:
    """The text of every string and number in ``payload``, keys excepted."""
    found: set[str] = set()
    stack = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, str):
            found.add(value)
            found.add(repr(value)[1:-1])  # as it appears inside a repr
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found.add(str(value))
    found.discard("")
    return found


def redact(text: str, payload: Any) -> str:
    """``text`` with the payload's values masked."""
    values = payload_values(payload)
    if not values:
        return text
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= SHORT:
            text = text.replace(value, MASK)
        else:
            text = re.sub(rf"(?<!\w){re.escape(value)}(?!\w)", MASK, text)
    return text
