"""Text that every database can store.

PostgreSQL refuses a NUL character in text and in JSON; neither database
takes a lone surrogate (half of a UTF-16 pair, which is not Unicode).
"""

from __future__ import annotations

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name if it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


ELIDED = "  ...\n"


def keep_end(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: its first line, then as much of its end as
    fits, from a line's start (a traceback's end holds the frame that raised)."""
    if len(text) <= limit:
        return text
    head = text[: text.find("\n") + 1] if "\n" in text else ""
    kept = head + ELIDED
    tail = text[len(text) - max(0, limit - len(kept)) :]
    if "\n" in tail[:-1]:
        tail = tail[tail.find("\n") + 1 :]
    return (kept + tail)[:limit] if len(kept) < limit else text[-limit:]


def storable_text(text: str) -> str:
    """``text`` with NUL written ``\\x00`` and each lone surrogate replaced by U+FFFD."""
    if UNSTORABLE.search(text) is None:
        return text
    return UNSTORABLE.sub(lambda found: "\\x00" if found.group() == "\x00" else "\ufffd", text)


def is_number_text(text: str) -> bool:
    """``text`` is a whole number in ASCII digits: ``str.isdigit`` also takes ``'²'``,
    which ``int()`` refuses, and ``'١٠'``, which it reads as 10."""
    return text.isascii() and text.isdigit()
