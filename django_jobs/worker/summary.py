"""The worker's periodic summary: how many outcomes it wrote, by kind, since the last one.

At the default verbosity a success logs nothing of its own (``django_jobs.events`` logs it
at DEBUG), so a healthy, busy worker says it is working with one INFO line every
``SUMMARY_SECONDS``: ``412 succeeded, 3 failed in the last 1 min``. The counts come from
the outcome writer (:meth:`~.recording.OutcomeWriter.take_counts`), which counts each
outcome as it reports it. No line when nothing was written; ``SUMMARY_SECONDS = 0`` turns
it off. The time is the caller's monotonic reading, so a test drives it without sleeping.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

from ..display import format_span
from .recording import OutcomeWriter

logger = logging.getLogger(__name__)

#: The kinds in the order the line gives them, and how each reads.
WORDS = {
    "succeeded": "succeeded",
    "failed": "failed (retry due later)",
    "dead_lettered": "dead-lettered",
    "cancelled": "cancelled",
    "released": "released",
    "snoozed": "snoozed",
    "lease_lost": "lease lost",
}


def summary_text(counts: Counter[str]) -> str:
    """``412 succeeded, 3 failed (retry due later)``: the kinds with a count, in order."""
    known = [kind for kind in WORDS if counts.get(kind)]
    others = sorted(kind for kind in counts if kind not in WORDS and counts[kind])
    return ", ".join(f"{counts[kind]} {WORDS.get(kind, kind)}" for kind in known + others)


class Summary:
    def __init__(self, writer: OutcomeWriter, every_seconds: float, start: float) -> None:
        self.writer = writer
        self.every_seconds = every_seconds
        self.since = start
        self.next_at = start + every_seconds

    def tick(self, now: float) -> None:
        """Log the summary if ``SUMMARY_SECONDS`` have passed since the last (``now``:
        monotonic seconds)."""
        if self.every_seconds > 0 and now >= self.next_at:
            self.flush(now)
            self.next_at = now + self.every_seconds

    def flush(self, now: float) -> None:
        """Log what was written since the last summary, if anything (the worker's stop
        calls it for the rest)."""
        if self.every_seconds <= 0:
            return
        counts = self.writer.take_counts()
        seconds, self.since = now - self.since, now
        if not +counts:
            return
        logger.info(
            "%s in the last %s",
            summary_text(counts),
            format_span(timedelta(seconds=seconds)),
            extra={
                "event": "worker_summary",
                "owner": self.writer.owner,
                "counts": dict(+counts),
                "seconds": round(seconds, 3),
            },
        )
