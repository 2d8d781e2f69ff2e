"""JobContext: cancellation, waiting, progress reports; no database."""

import threading
import time
from datetime import timedelta

import pytest

from django_jobs import JobCancelled, JobContext, Snooze


def make_context():
    return JobContext(job_id=1, name="n", queue="default", attempt=1, payload=None)


def test_context_wait_returns_early_once_cancelled():
    ctx = make_context()
    threading.Timer(0.05, ctx.cancel).start()
    started = time.monotonic()
    assert ctx.wait(5) is True
    assert time.monotonic() - started < 2
    assert ctx.cancelled


def test_context_wait_after_a_cancel_returns_at_once():
    ctx = make_context()
    ctx.cancel()
    started = time.monotonic()
    assert ctx.wait(5) is True
    assert time.monotonic() - started < 1


def test_a_context_makes_its_cancel_event_only_when_a_handler_waits():
    # A thread's event per attempt cost the worker as much as the rest of the context.
    ctx = make_context()
    ctx.cancel()
    assert ctx.cancelled and ctx._cancel_event is None
    waiting = make_context()
    assert waiting.wait(0.001) is False
    assert waiting._cancel_event is not None
    waiting.cancel()
    assert waiting._cancel_event.is_set()


def test_context_wait_times_out_when_not_cancelled():
    ctx = make_context()
    assert ctx.wait(0.01) is False
    ctx.raise_if_cancelled()  # no error
    ctx.cancel()
    with pytest.raises(JobCancelled):
        ctx.raise_if_cancelled()


@pytest.mark.parametrize("count", [2**63, -1, 1.5, True, "3"])
def test_context_progress_refuses_a_count_the_columns_cannot_hold(count):
    ctx = make_context()
    with pytest.raises(ValueError, match="from 0 to 2\\*\\*63 - 1"):
        ctx.progress(count)
    with pytest.raises(ValueError, match="total must be"):
        ctx.progress(1, count)
    assert ctx.reported_progress() == (0, None)  # nothing kept to be written


def test_context_progress_keeps_the_largest_count_and_a_storable_note():
    ctx = make_context()
    ctx.progress(2**63 - 1, 2**63 - 1, note="bad \x00 byte, lone \udc80 half" + "x" * 300)
    _, report = ctx.reported_progress()
    assert (report.done, report.total) == (2**63 - 1, 2**63 - 1)
    assert report.note.startswith("bad \\x00 byte, lone \ufffd half")
    assert len(report.note) == 200


@pytest.mark.parametrize(
    "seconds", [2.5e11, 1.7e12, timedelta.max, timedelta(days=36_501)], ids=repr
)
def test_snooze_refuses_a_delay_no_date_can_hold_naming_the_limit(seconds):
    with pytest.raises(ValueError, match="from 0 to 3153600000 \\(about a century\\)"):
        Snooze(seconds)
    with pytest.raises(ValueError, match="about a century"):
        JobContext(1, "n", "q", 1, {}).snooze(seconds)


def test_snooze_takes_a_century():
    assert Snooze(timedelta(days=36_500)).seconds == 100 * 365 * 86400
