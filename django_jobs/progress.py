"""A handler's progress report (``ctx.progress()``), checked as it is made: what the
heartbeat writes to the job's row with its lease renewal."""

from __future__ import annotations

import reprlib
from typing import Any, NamedTuple

from .text import storable_text

#: The longest progress note stored; a longer one is cut.
PROGRESS_NOTE_LENGTH = 200
#: The largest count the progress columns hold (a 64-bit integer).
PROGRESS_COUNT_MAX = 2**63 - 1


class Progress(NamedTuple):
    """A handler's last report: ``done`` of ``total`` (None if unknown), with a note."""

    done: int
    total: int | None
    note: str

    @classmethod
    def made(cls, done: Any, total: Any = None, note: Any = "") -> Progress:
        """A report of ``ctx.progress()``'s arguments; :class:`ValueError` saying what is
        wrong with them. The note is stored as an error's text is (NUL written out, a lone
        surrogate replaced), cut to :data:`PROGRESS_NOTE_LENGTH`."""
        done = _count(done, "done")
        if total is not None:
            total = _count(total, "total")
        if not isinstance(note, str):
            raise ValueError(f"ctx.progress(): note must be a string, got {note!r}")
        return cls(done, total, storable_text(str(note))[:PROGRESS_NOTE_LENGTH])


def _count(value: Any, what: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= PROGRESS_COUNT_MAX
    ):
        raise ValueError(
            f"ctx.progress(): {what} must be a whole number from 0 to 2**63 - 1, "
            f"got {reprlib.repr(value)}"
        )
    return int(value)
