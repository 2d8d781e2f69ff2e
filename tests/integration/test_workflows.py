"""Workflows on every database: dependencies, cascades, retries, chains, batches and their
callbacks, through the worker's own tick (``run_once``) and the public API."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from django_jobs import batch, cancel_job, chain, retry_job, schedule_job, schedule_jobs, signals
from django_jobs.db import get_driver
from django_jobs.exceptions import UnknownJob
from django_jobs.maintenance.rescuer import UNFOLLOWED_SECONDS, follow_unfollowed
from django_jobs.models import Batch, Job, JobDependency, JobStatus
from django_jobs.scheduling import JobSpec
from tests.conftest import START

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clock(clock_ahead):
    return clock_ahead


def statuses(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=job.pk).status for job in jobs]


def drain(worker, rounds: int = 50) -> None:
    w = worker()
    for _ in range(rounds):
        if not w.run_once().claimed:
            return


# -- dependencies -----------------------------------------------------------------------


def test_dependent_waits_until_its_dependency_succeeds_then_runs(worker):
    first = schedule_job("tests.flow_step", "a")
    second = schedule_job("tests.flow_step", "b", depends_on=[first])
    assert second.status == JobStatus.WAITING
    w = worker()
    assert w.run_once().claimed == 1  # only the first: the second waits
    assert statuses(first, second) == [JobStatus.SUCCEEDED, JobStatus.PENDING]
    w.run_once()
    second.refresh_from_db()
    assert second.status == JobStatus.SUCCEEDED
    assert second.result["seen"] == {str(first.pk): first.__class__.objects.get(pk=first.pk).result}


def test_dependency_already_succeeded_counts_at_once(worker):
    first = schedule_job("tests.ok")
    drain(worker)
    second = schedule_job("tests.ok", depends_on=[first.pk])
    assert second.status == JobStatus.PENDING
    assert statuses(second) == [JobStatus.PENDING]


def test_dependency_already_failed_cancels_the_new_job_at_once(worker):
    failed = schedule_job("tests.flow_fail")
    drain(worker)
    new = schedule_job("tests.ok", depends_on=[failed])
    assert statuses(new) == [JobStatus.CANCELLED]
    new.refresh_from_db()
    assert new.last_error.startswith(f"DependencyFailed: job #{failed.pk} (tests.flow_fail)")


def test_failed_dependency_cascades_to_dependents_and_theirs(worker):
    first = schedule_job("tests.flow_fail")
    second = schedule_job("tests.ok", depends_on=[first])
    third = schedule_job("tests.ok", depends_on=[second])
    tolerant = schedule_job("tests.ok", depends_on=[first], ignore_failed_dependencies=True)
    drain(worker)
    assert statuses(first, second, third, tolerant) == [
        JobStatus.DEAD_LETTERED,
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
        JobStatus.SUCCEEDED,
    ]
    third.refresh_from_db()
    assert third.last_error.startswith(
        f"DependencyFailed: job #{second.pk} (tests.ok) ended cancelled"
    )


def test_cascade_sends_job_cancelled_with_the_reason():
    first = schedule_job("tests.ok")
    second = schedule_job("tests.ok", depends_on=[first])
    heard = []

    def listen(sender, **kwargs):
        heard.append((kwargs["job_id"], kwargs.get("error", "")))

    signals.job_cancelled.connect(listen)
    try:
        cancel_job(first.pk)
    finally:
        signals.job_cancelled.disconnect(listen)
    assert [job_id for job_id, _ in heard] == [first.pk, second.pk]
    assert heard[1][1].startswith(f"DependencyFailed: job #{first.pk}")
    assert statuses(second) == [JobStatus.CANCELLED]


def test_cancel_of_a_waiting_job_cancels_it_and_its_dependents():
    first = schedule_job("tests.ok", run_at=START + timedelta(days=1))
    second = schedule_job("tests.ok", depends_on=[first])
    third = schedule_job("tests.ok", depends_on=[second])
    cancel_job(second.pk)
    assert statuses(first, second, third) == [
        JobStatus.PENDING,
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
    ]


def test_retry_of_a_failed_dependency_puts_what_it_cancelled_back_to_waiting(worker):
    first = schedule_job("tests.flow_fail")
    second = schedule_job("tests.ok", depends_on=[first])
    third = schedule_job("tests.ok", depends_on=[second])
    drain(worker)
    assert statuses(second, third) == [JobStatus.CANCELLED, JobStatus.CANCELLED]
    assert retry_job(first.pk)
    assert statuses(first, second, third) == [
        JobStatus.PENDING,
        JobStatus.WAITING,
        JobStatus.WAITING,
    ]
    Job.objects.filter(pk=first.pk).update(name="tests.ok")  # the bug is fixed
    drain(worker)
    assert statuses(first, second, third) == [JobStatus.SUCCEEDED] * 3


def test_dependencies_on_specs_of_the_same_call_and_chain(worker):
    a = JobSpec("tests.flow_step", "a")
    b = {"job": "tests.flow_step", "payload": "b", "depends_on": [a]}
    rows = schedule_jobs([b, a])
    assert [row.status for row in rows] == [JobStatus.WAITING, JobStatus.PENDING]
    chained = chain(JobSpec("tests.flow_step", 1), {"job": "tests.flow_step", "payload": 2})
    assert [row.status for row in chained] == [JobStatus.PENDING, JobStatus.WAITING]
    assert JobDependency.objects.filter(job=chained[1], depends_on=chained[0]).exists()
    drain(worker)
    assert statuses(*rows, *chained) == [JobStatus.SUCCEEDED] * 4


@pytest.mark.parametrize(
    ("depends_on", "error"),
    [
        ([10**12], "no job has the id 1000000000000"),
        (["x"], "is neither a Job, a job id, nor a spec of the same call"),
        ([JobSpec("tests.ok")], "must be one of the same schedule_jobs() call"),
    ],
)
def test_bad_dependencies_are_refused_and_nothing_is_written(depends_on, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        schedule_job("tests.ok", depends_on=depends_on)
    assert not Job.objects.exists()


def test_a_cycle_among_specs_is_refused_and_nothing_is_written():
    a, b = JobSpec("tests.ok"), JobSpec("tests.ok")
    object.__setattr__(a, "depends_on", (b,))  # a waits for b, b for a
    object.__setattr__(b, "depends_on", (a,))
    with pytest.raises(ValueError, match=r"cycle \(spec 0 -> spec 1 -> spec 0\)"):
        schedule_jobs([a, b])
    assert not Job.objects.exists()


def test_a_dependency_of_another_database_is_refused():
    first = schedule_job("tests.ok")
    first._state.db = "elsewhere"
    with pytest.raises(ValueError, match="only wait for jobs of its own database"):
        schedule_job("tests.ok", depends_on=[first])
    assert Job.objects.count() == 1


def one_waits_for_the_other(first: Callable[[], object], second: Callable[[], object]) -> bool:
    """Run ``first``, then ``second``, each in a transaction on a thread of its own, the
    first's kept open until the second has run for 0.3 s: whether the second was waiting
    for it then. An error in either is raised."""
    stepped, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run(step: Callable[[], object], hold: bool) -> None:
        try:
            with transaction.atomic():
                step()
                if hold:
                    stepped.set()
                    go.wait(5)
        except BaseException as exc:  # noqa: BLE001 - raised below
            errors.append(exc)
        finally:
            connection.close()

    one = threading.Thread(target=run, args=(first, True))
    one.start()
    stepped.wait(5)
    other = threading.Thread(target=run, args=(second, False))
    other.start()
    other.join(0.3)
    waited = other.is_alive()
    go.set()
    one.join(5)
    other.join(5)
    if errors:
        raise errors[0]
    return waited


def test_two_dependencies_ending_at_once_release_their_dependent(worker):
    """Each end's steps lock the dependent before they read what else it waits for: the
    second end's steps wait for the first's to commit, then see both ends. Read without
    the lock, each would see the other dependency still running, and leave it waiting."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite's writers take turns: two ends cannot interleave")
    a, b = schedule_job("tests.ok"), schedule_job("tests.ok")
    c = schedule_job("tests.ok", depends_on=[a, b])
    workflows = get_driver().workflows

    def end(job: Job) -> Callable[[], object]:
        def step() -> object:
            Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, finished_at=START)
            return workflows.ended([job.pk], START)

        return step

    assert one_waits_for_the_other(end(a), end(b))  # for the first's lock on the dependent
    assert statuses(c) == [JobStatus.PENDING]


def test_the_steps_of_one_end_taken_twice_at_once_are_taken_once():
    """The steps of one end taken by two sessions at once (its worker's, and the leader's
    repair of an end it found old enough): the second waits for the first's lock on the
    ended row, then finds its mark gone. Read without the lock, both would count it in
    its batch."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite's writers take turns: two sessions' steps cannot interleave")
    with batch(on_finish=("tests.ok", None)) as b:
        member = schedule_job("tests.ok")
    dependent = schedule_job("tests.ok", depends_on=[member])
    Job.objects.filter(pk=member.pk).update(status=JobStatus.SUCCEEDED, finished_at=START)
    workflows = get_driver().workflows
    taken: list[bool] = []

    def take() -> None:
        taken.append(bool(workflows.ended([member.pk], START)))

    assert one_waits_for_the_other(take, take)  # for the first's lock on the ended row
    assert taken == [True, False]
    b.refresh_from_db()
    assert (b.total, b.succeeded, b.finished_at is not None) == (1, 1, True)
    assert Job.objects.filter(batch=b).count() == 2  # the member and one callback
    assert statuses(dependent) == [JobStatus.PENDING]


# -- batches ----------------------------------------------------------------------------


def test_batch_callbacks_go_in_once_when_every_member_has_ended(worker):
    with batch(
        on_finish=("tests.flow_step", "done"),
        on_failure=JobSpec("tests.flow_step", "bad"),
        on_success=("tests.flow_step", "good"),
    ) as b:
        members = schedule_jobs([{"job": "tests.ok"}] * 3 + [{"job": "tests.flow_fail"}])
    b.refresh_from_db()
    assert b.total == 4 and b.finished_at is None
    drain(worker)
    b.refresh_from_db()
    assert (b.succeeded, b.dead_lettered, b.cancelled) == (3, 1, 0)
    assert b.finished_at is not None
    assert set(b.callback_jobs) == {"on_finish", "on_failure"}
    callbacks = Job.objects.filter(pk__in=b.callback_jobs.values()).order_by("pk")
    assert [c.payload for c in callbacks] == ["done", "bad"]
    assert all(c.status == JobStatus.SUCCEEDED for c in callbacks)
    assert callbacks[0].result["batch"] == [b.pk, 4]
    assert all(m.batch_id == b.pk for m in Job.objects.filter(pk__in=[m.pk for m in members]))


def test_a_batch_finishes_when_its_last_member_ended_whatever_order_its_ends_are_taken():
    """Each worker takes the steps of the ends it wrote, at the time it wrote them: the
    member whose steps finish the batch may have ended before another, counted already."""
    with batch(on_finish=("tests.ok", None)) as b:
        early, late = schedule_job("tests.ok"), schedule_job("tests.ok")
    workflows = get_driver().workflows
    for member, ended_at in ((late, START + timedelta(seconds=1)), (early, START)):
        Job.objects.filter(pk=member.pk).update(status=JobStatus.SUCCEEDED, finished_at=ended_at)
        workflows.ended([member.pk], ended_at)
    b.refresh_from_db()
    assert b.finished_at == START + timedelta(seconds=1)
    [callback] = Job.objects.filter(pk=b.callback_jobs["on_finish"])
    assert callback.run_at == b.finished_at


def test_batch_member_adds_siblings_and_the_batch_waits_for_them(worker):
    with batch(on_finish=("tests.flow_step", "end")) as b:
        schedule_job("tests.flow_fanout", 3)
    drain(worker)
    b.refresh_from_db()
    assert (b.total, b.succeeded) == (4, 4)
    [callback] = Job.objects.filter(pk=b.callback_jobs["on_finish"])
    assert callback.status == JobStatus.SUCCEEDED


def test_batch_member_end_that_leaves_members_reads_neither_batch_nor_links(clock):
    from django.test.utils import CaptureQueriesContext

    with batch(on_finish=("tests.ok", None)) as b:
        first, second = schedule_jobs([{"job": "tests.ok"}] * 2)
    now = clock.now()
    ended = Job.objects.filter(pk__in=[first.pk, second.pk])
    ended.update(status=JobStatus.SUCCEEDED, finished_at=now)
    with CaptureQueriesContext(connection) as queries:
        get_driver().workflows.ended([first.pk], now)
    b.refresh_from_db()
    assert (b.succeeded, b.finished_at) == (1, None)
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1 and Batch._meta.db_table not in reads[0]  # its own rows alone
    get_driver().workflows.ended([second.pk], now)  # the last end reads the batch, finishes it
    b.refresh_from_db()
    assert (b.succeeded, set(b.callback_jobs)) == (2, {"on_finish"})


def test_ended_takes_no_step_for_a_job_that_has_not_ended():
    with batch() as b:
        job = schedule_job("tests.ok")  # pending, and marked as a batch member
    followed = get_driver().workflows.ended([job.pk], START)
    assert not followed
    assert Job.objects.get(pk=job.pk).workflow_pending is True  # its end will take them
    b.refresh_from_db()
    assert (b.ended, b.finished_at) == (0, None)


def test_release_wakes_the_queues_of_due_dependents_reading_each_row_once(monkeypatch):
    from django.test.utils import CaptureQueriesContext

    first = schedule_job("tests.ok")
    due = schedule_job("tests.ok", depends_on=[first], queue="due")
    schedule_job("tests.ok", depends_on=[first], queue="later", delay=timedelta(hours=1))
    Job.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED, finished_at=START)
    driver, woken = get_driver(), []
    monkeypatch.setattr(driver, "wake", woken.append)
    with CaptureQueriesContext(connection) as queries:
        followed = driver.workflows.ended([first.pk], timezone.now())
    assert len(followed.released) == 2 and woken == [["due"]] and followed.woken == ["due"]
    assert statuses(due) == [JobStatus.PENDING]
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(reads) == 4  # the end, its links, the dependents locked, their dependencies


def test_empty_batch_finishes_at_once():
    with batch(on_success=("tests.ok", None)) as b:
        pass
    assert b.finished_at is not None and set(b.callback_jobs) == {"on_success"}


def test_batch_block_that_raises_keeps_nothing():
    with pytest.raises(RuntimeError), batch(on_finish=("tests.ok", None)):
        schedule_job("tests.ok")
        raise RuntimeError("no")
    assert not Job.objects.exists() and not Batch.objects.exists()


def test_batch_callback_of_an_unknown_job_is_refused():
    with pytest.raises(UnknownJob):
        with batch(on_finish=("tests.no_such_job", None)):
            schedule_job("tests.ok")
    assert not Job.objects.exists() and not Batch.objects.exists()


def test_adding_to_a_finished_batch_is_refused():
    with batch() as b:
        pass
    from django_jobs.workflows import BatchView

    with pytest.raises(ValueError, match="has finished"):
        BatchView.read(b.pk, "default").add("tests.ok")


def test_retry_of_a_member_moves_the_counts(worker):
    with batch() as b:
        failed = schedule_job("tests.flow_fail")
        schedule_job("tests.ok")
    drain(worker)
    b.refresh_from_db()
    assert (b.succeeded, b.dead_lettered) == (1, 1)
    retry_job(failed.pk)
    b.refresh_from_db()
    assert (b.succeeded, b.dead_lettered) == (1, 0)
    Job.objects.filter(pk=failed.pk).update(name="tests.ok")
    drain(worker)
    b.refresh_from_db()
    assert (b.succeeded, b.dead_lettered) == (2, 0)


# -- what a crash leaves ----------------------------------------------------------------


def test_an_end_whose_steps_were_not_taken_is_followed_by_the_leader(worker):
    """A job ended, its steps not taken (the worker died between): the repair takes them."""
    with batch(on_finish=("tests.ok", None)) as b:
        first = schedule_job("tests.ok")
    second = schedule_job("tests.ok", depends_on=[first])
    now = START
    # The end written as a crashed settle leaves it: ended, still marked.
    Job.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED, finished_at=now)
    assert follow_unfollowed(now) == 0  # too young: its worker may be taking them
    later = now + timedelta(seconds=UNFOLLOWED_SECONDS + 1)
    assert follow_unfollowed(later) == 1
    b.refresh_from_db()
    assert b.finished_at is not None and b.succeeded == 1
    assert statuses(second) == [JobStatus.PENDING]
    assert follow_unfollowed(later) == 0  # once


# -- every end takes the steps, whichever path ended it ---------------------------------


def test_a_member_whose_worker_died_on_its_last_attempt_counts_and_cascades(clock):
    """The rescuer's end (a lapsed lease, no attempt left) takes the same steps."""
    from django_jobs.maintenance.rescuer import reclaim_expired_leases

    with batch(on_failure=("tests.ok", None)) as b:
        member = schedule_job("tests.ok", max_attempts=1)
    dependent = schedule_job("tests.ok", depends_on=[member])
    now = clock.now()
    Job.objects.filter(pk=member.pk).update(
        status=JobStatus.RUNNING,
        attempt=1,
        attempts_used=1,
        lease_owner="gone",
        lease_expires_at=now - timedelta(seconds=1),
    )
    assert reclaim_expired_leases(now) == 1
    b.refresh_from_db()
    assert (b.dead_lettered, b.finished_at is not None) == (1, True)
    assert set(b.callback_jobs) == {"on_failure"}
    assert statuses(member, dependent) == [JobStatus.DEAD_LETTERED, JobStatus.CANCELLED]


def test_a_pending_member_with_no_attempt_left_counts_in_its_batch(clock):
    from django_jobs.maintenance.rescuer import dead_letter_exhausted

    with batch() as b:
        member = schedule_job("tests.ok")
    Job.objects.filter(pk=member.pk).update(attempts_used=F("max_attempts"))
    assert dead_letter_exhausted(clock.now()) == 1
    b.refresh_from_db()
    assert (b.dead_lettered, b.finished_at is not None) == (1, True)


def test_a_plain_job_is_in_no_workflow_and_its_end_takes_no_step(worker):
    job = schedule_job("tests.ok")
    assert job.workflow_pending is None
    drain(worker)
    job.refresh_from_db()
    assert (job.status, job.workflow_pending) == (JobStatus.SUCCEEDED, None)


def test_a_finished_batch_goes_once_its_jobs_are_pruned(settings, clock):
    from django_jobs.maintenance.cleaner import prune_finished

    day = timedelta(days=1)
    settings.DJANGO_JOBS = {
        "RETENTION": {"succeeded": day, "cancelled": day, "dead_lettered": 7 * day}
    }
    with batch() as emptied:
        done = schedule_job("tests.ok")
    with batch() as busy:
        schedule_job("tests.ok")
    finished = clock.now() - timedelta(days=8)
    Job.objects.filter(pk=done.pk).update(status=JobStatus.SUCCEEDED, finished_at=finished)
    Batch.objects.update(finished_at=finished)
    prune_finished(clock.now(), using="default")
    assert list(Batch.objects.values_list("pk", flat=True)) == [busy.pk]  # a job is left
    assert emptied.pk != busy.pk


def test_steps_the_database_refuses_leave_the_end_written_and_the_leader_takes_them(
    worker, monkeypatch, caplog
):
    """A settle's steps that fail (a deadlock, a lost connection) do not undo or hide the
    written end: it is reported, and the leader takes the steps later."""
    from django.db import OperationalError

    first = schedule_job("tests.ok")
    second = schedule_job("tests.ok", depends_on=[first])
    workflows = get_driver().workflows

    def refused(ids, now, **kwargs):
        raise OperationalError("deadlock detected")

    with monkeypatch.context() as patched:
        patched.setattr(workflows, "ended", refused)
        assert worker().run_once().succeeded == 1
    assert statuses(first, second) == [JobStatus.SUCCEEDED, JobStatus.WAITING]
    assert f"workflow steps of job(s) #{first.pk} not taken" in caplog.text
    finished = Job.objects.get(pk=first.pk).finished_at
    assert follow_unfollowed(finished + timedelta(seconds=UNFOLLOWED_SECONDS + 1)) == 1
    assert statuses(second) == [JobStatus.PENDING]


def test_a_fan_out_wider_than_a_statement_binds_is_followed_in_pieces(worker, monkeypatch):
    """Ids are bound a piece at a time (SQLite before 3.32 binds at most 999 values)."""
    from django_jobs.db import workflows

    monkeypatch.setattr(workflows, "CHUNK", 2)
    first = schedule_job("tests.flow_fail")
    fanned = schedule_jobs([{"job": "tests.ok", "depends_on": [first]}] * 7)
    last = schedule_job("tests.ok", depends_on=fanned)
    assert set(statuses(*fanned, last)) == {JobStatus.WAITING}
    drain(worker)
    assert set(statuses(*fanned, last)) == {JobStatus.CANCELLED}
    Job.objects.filter(pk=first.pk).update(name="tests.ok")
    assert retry_job(first.pk)
    assert set(statuses(*fanned, last)) == {JobStatus.WAITING}
    drain(worker)
    assert set(statuses(first, *fanned, last)) == {JobStatus.SUCCEEDED}


def test_a_plain_spec_beside_a_dependent_one_stays_a_plain_job():
    first = JobSpec("tests.ok")
    plain, dependent, _ = schedule_jobs(
        [JobSpec("tests.ok"), JobSpec("tests.ok", depends_on=[first]), first]
    )
    assert Job.objects.get(pk=plain.pk).workflow_pending is None
    assert Job.objects.get(pk=dependent.pk).workflow_pending is True
