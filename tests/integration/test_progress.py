"""ctx.progress(): validated in the handler, written by the heartbeat's renewal."""

import pytest

from django_jobs import JobContext
from django_jobs.models import Job, JobStatus
from django_jobs.worker.execution import make_context
from tests.conftest import execute_held_on_a_thread, wait_until


def test_progress_refuses_what_is_not_a_count():
    ctx = JobContext(1, "tests.ok", "default", 1, {})
    for done, total in ((-1, None), (1.5, None), (True, None), (1, -2), ("3", None)):
        with pytest.raises(ValueError, match=r"ctx.progress\(\): (done|total) must be"):
            ctx.progress(done, total)
    with pytest.raises(ValueError, match="note must be a string"):
        ctx.progress(1, note=3)  # type: ignore[arg-type]
    ctx.progress(2, 5, "x" * 500)
    assert ctx.reported_progress() == (1, (2, 5, "x" * 200))  # the note is cut, not refused


@pytest.mark.django_db(transaction=True)  # the renewal runs on a thread of its own
def test_progress_is_written_by_the_next_heartbeat_and_kept_after_the_job(worker, make_job, clock):
    job = make_job(name="tests.patient", payload={"seconds": 30})
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    ctx = make_context(claimed)
    held = w.inflight.add(claimed, ctx, clock.now(), None)
    ctx.progress(40, 100, "rows copied")
    assert Job.objects.get(pk=job.pk).progress_done is None  # nothing written by the call
    clock.advance(1)
    w.inflight.beat(clock.now())  # no lease is due: the report alone makes the statement
    job.refresh_from_db()
    assert (job.progress_done, job.progress_total, job.progress_note) == (40, 100, "rows copied")
    assert job.lease_expires_at > claimed.lease_expires_at  # the same statement renewed it
    w.inflight.finish(held)
    w.inflight.settled(held)


@pytest.mark.django_db(transaction=True)
def test_progress_of_a_running_handler_reaches_the_row_under_execute_held(worker, make_job, clock):
    job = make_job(name="example.counts", payload={"total": 3, "step": 30})
    w = worker()
    [claimed] = w.claimer.claim("default", clock.now(), 1)
    statuses = []

    thread = execute_held_on_a_thread(w, claimed, statuses)
    wait_until(lambda: any(h.ctx.reported_progress()[0] for h in w.inflight.snapshot()))
    w.inflight.beat(clock.now())
    assert Job.objects.get(pk=job.pk).progress_done == 0
    w.inflight.cancel_all()
    thread.join(10)
    assert statuses == [JobStatus.PENDING]  # cancelled by a stop: handed back
