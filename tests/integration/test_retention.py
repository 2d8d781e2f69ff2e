"""Retention: finished jobs are deleted with their attempts, in short batches, once expired."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.db.models.signals import post_delete
from django.test import override_settings

from django_jobs.db import ClaimRequest, get_driver
from django_jobs.db.records import Cascade
from django_jobs.maintenance.cleaner import cascades, expired_ids, prune_finished
from django_jobs.models import Attempt, Job, JobDependency, JobStatus
from tests.conftest import START
from tests.support.plans import explain, scans, sorts

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def finished(status: JobStatus, age: timedelta, count: int = 1) -> list[Job]:
    """``count`` jobs of ``status`` that finished ``age`` before START."""
    return Job.objects.bulk_create(
        Job(
            name="tests.ok",
            status=status,
            run_at=START - age,
            created_at=START - age,
            finished_at=START - age,
        )
        for _ in range(count)
    )


def prune(**options: Any) -> int:
    return prune_finished(START, using="default", **options)


def left(*jobs: Job) -> set[int]:
    return set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", flat=True))


@contextmanager
def statements_sent(target: Any = None) -> Iterator[list[tuple[str, Any]]]:
    """The (sql, params) each statement on ``target`` (the connection) is sent with."""
    sent: list[tuple[str, Any]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        sent.append((sql, params))
        return execute(sql, params, many, ctx)

    with (target or connection).execute_wrapper(record):
        yield sent


def picks(sent: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The statements that pick a batch of expired ids: one per batch, each its own
    transaction (on PostgreSQL the batch's one statement, which deletes them too)."""
    table = connection.ops.quote_name(Job._meta.db_table)
    column = connection.ops.quote_name("finished_at")
    return [
        (sql, params)
        for sql, params in sent
        if f"SELECT {table}." in sql and f"ORDER BY {table}.{column}" in sql
    ]


def batches(sent: list[tuple[str, Any]]) -> int:
    return len(picks(sent))


def test_prune_defaults_delete_succeeded_and_cancelled_after_7_days_dead_letters_after_30():
    [old_ok] = finished(JobStatus.SUCCEEDED, 7 * DAY + timedelta(seconds=1))
    [young_ok] = finished(JobStatus.SUCCEEDED, 7 * DAY - timedelta(seconds=1))
    [old_cancelled] = finished(JobStatus.CANCELLED, 8 * DAY)
    [young_cancelled] = finished(JobStatus.CANCELLED, 6 * DAY)
    [week_old_dead] = finished(JobStatus.DEAD_LETTERED, 8 * DAY)
    [old_dead] = finished(JobStatus.DEAD_LETTERED, 30 * DAY + timedelta(seconds=1))
    assert prune() == 3
    assert left(old_ok, young_ok, old_cancelled, young_cancelled, week_old_dead, old_dead) == {
        young_ok.pk,
        young_cancelled.pk,
        week_old_dead.pk,
    }


@override_settings(DJANGO_JOBS={"RETENTION": {"dead_lettered": None, "succeeded": DAY}})
def test_prune_none_keeps_forever_and_unnamed_statuses_keep_their_default():
    [ancient_dead] = finished(JobStatus.DEAD_LETTERED, 3650 * DAY)
    [two_days_ok] = finished(JobStatus.SUCCEEDED, 2 * DAY)
    [six_days_cancelled, eight_days_cancelled] = finished(JobStatus.CANCELLED, 6 * DAY) + finished(
        JobStatus.CANCELLED, 8 * DAY
    )
    assert prune() == 2
    assert left(ancient_dead, two_days_ok, six_days_cancelled, eight_days_cancelled) == {
        ancient_dead.pk,
        six_days_cancelled.pk,
    }


def test_prune_never_touches_pending_or_running_jobs(make_job):
    # Rows that finished once and were sent back (a retried dead letter, say).
    long_ago = START - 365 * DAY
    pending = make_job(status=JobStatus.PENDING, finished_at=long_ago)
    running = make_job(
        status=JobStatus.RUNNING,
        finished_at=long_ago,
        lease_owner="w1",
        lease_expires_at=START + DAY,
    )
    Attempt.objects.create(job=running, number=1, owner="w1", started_at=START)
    assert prune() == 0
    assert left(pending, running) == {pending.pk, running.pk}
    assert Attempt.objects.filter(job=running).count() == 1


def test_prune_deletes_the_attempts_with_their_jobs():
    [old, young] = finished(JobStatus.SUCCEEDED, 10 * DAY) + finished(JobStatus.SUCCEEDED, DAY)
    for job in (old, young):
        Attempt.objects.bulk_create(
            Attempt(job=job, number=n, owner="w1", started_at=START - 10 * DAY) for n in (1, 2)
        )
    assert prune() == 1
    assert left(old, young) == {young.pk}
    assert list(Attempt.objects.values_list("job_id", flat=True)) == [young.pk, young.pk]


def test_prune_works_in_batches_and_max_batches_bounds_one_call():
    finished(JobStatus.SUCCEEDED, 10 * DAY, count=25)
    finished(JobStatus.DEAD_LETTERED, 40 * DAY, count=5)
    with statements_sent() as sent:
        assert prune(batch=10, max_batches=2) == 20
    assert batches(sent) == 2
    with statements_sent() as sent:
        assert prune(batch=10) == 10
    # 5 succeeded (fewer than a batch: done), none cancelled, 5 dead letters.
    assert batches(sent) == 3
    assert not Job.objects.exists()


@pytest.mark.parametrize("options", [{"batch": 0}, {"batch": True}, {"max_batches": 0}])
def test_prune_refuses_a_batch_or_max_batches_that_is_not_positive(options):
    with pytest.raises(ValueError, match="must be a positive integer"):
        prune(**options)


# -- a big table, claims going on meanwhile -------------------------------------------


@pytest.mark.django_db(transaction=True)  # the claims run on another connection
def test_prune_50000_finished_rows_goes_in_batches_while_claims_go_on(make_job):
    for chunk in range(50):
        finished(JobStatus.SUCCEEDED, 10 * DAY + chunk * timedelta(seconds=1), count=1000)
    due = [make_job() for _ in range(300)]
    sent: list[tuple[str, Any]] = []
    picked_at: list[float] = []  # when each batch's pick was sent
    result: list[int] = []
    errors: list[BaseException] = []

    def timed(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if picks([(sql, params)]):
            picked_at.append(time.monotonic())
        return execute(sql, params, many, ctx)

    def run() -> None:
        try:
            with statements_sent(connections["default"]) as statements:
                with connections["default"].execute_wrapper(timed):
                    result.append(prune(batch=1000))
            sent.extend(statements)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    pruner = threading.Thread(target=run)
    pruner.start()
    claims: list[tuple[float, float]] = []  # each successful claim's start and end
    while pruner.is_alive() and len(claims) < len(due):
        began = time.monotonic()
        if get_driver().claim(ClaimRequest("default", "w1", START, 60)):
            claims.append((began, time.monotonic()))
        time.sleep(0.002)  # a worker's tick: the pruner gets its turn at the write lock
    pruner.join(60)
    assert not errors and result == [50_000]
    # 50 full batches and an empty one of succeeded jobs; one empty pick for each other status.
    assert batches(sent) == 53
    assert all(" LIMIT 1000" in sql for sql, _ in picks(sent))
    # Whole claims went through between the pruning's first batch and its last.
    first, last = picked_at[0], picked_at[-1]
    during = [claim for claim in claims if first < claim[0] and claim[1] < last]
    assert len(during) >= 5, (len(during), len(claims), last - first)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 0
    assert Job.objects.count() == len(due)


@pytest.mark.skip_locked
@pytest.mark.django_db(transaction=True)  # the lock is held on another connection
def test_prune_passes_a_row_another_session_holds_without_waiting():
    [held, *others] = finished(JobStatus.SUCCEEDED, 10 * DAY, count=3)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                list(Job.objects.select_for_update().filter(pk=held.pk))
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with connection.cursor() as cursor:  # a wait would fail, not hang the test
            if connection.vendor == "mysql":
                cursor.execute("SET SESSION innodb_lock_wait_timeout = 2")
            else:
                cursor.execute("SET lock_timeout = '2s'")
        try:
            assert prune() == 2
        finally:
            with connection.cursor() as cursor:
                if connection.vendor == "mysql":
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
                else:
                    cursor.execute("RESET lock_timeout")
    finally:
        release.set()
        holder.join(10)
    assert left(held, *others) == {held.pk}
    assert prune() == 1


# -- the plan --------------------------------------------------------------------------


def test_prune_pick_seeks_the_finished_index_without_a_sort(make_job):
    Job.objects.bulk_create(
        Job(name="tests.ok", status=JobStatus.PENDING, run_at=START, created_at=START)
        for _ in range(3000)
    )
    finished(JobStatus.SUCCEEDED, DAY, count=50)
    finished(JobStatus.DEAD_LETTERED, DAY, count=50)
    finished(JobStatus.SUCCEEDED, 10 * DAY, count=20)
    with statements_sent() as sent:
        assert prune(batch=5, max_batches=1) == 5
    [(sql, params)] = picks(sent)
    planned = expired_ids(get_driver(), JobStatus.SUCCEEDED, START, 5)
    assert planned.query.sql_with_params()[0] in sql
    plan = explain(sql, params)  # on PostgreSQL the whole batch: the pick and the deletes
    assert "django_jobs_finished_idx" in plan, plan
    assert not sorts(plan), plan
    assert not scans(plan, "django_jobs_job"), plan


# -- one statement a batch, where nothing asks for Django's cascade ----------------------


def test_a_batch_deletes_what_refers_to_its_jobs_and_nothing_else(make_job):
    """The attempts of the pruned jobs and the dependency links from and to them go; a
    young job's, and the links between jobs that stay, do not. Not by Django's cascade: on
    PostgreSQL in one statement, elsewhere a delete a table after the pick."""
    old = finished(JobStatus.SUCCEEDED, 10 * DAY, count=3)
    [young] = finished(JobStatus.SUCCEEDED, DAY)
    waiting = [make_job(), make_job()]
    for job in (*old, young):
        Attempt.objects.create(job=job, number=1, owner="w1", started_at=START - 10 * DAY)
    JobDependency.objects.bulk_create(
        [
            JobDependency(job=old[0], depends_on=old[1]),  # both pruned
            JobDependency(job=waiting[0], depends_on=old[2]),  # to a pruned job
            JobDependency(job=old[2], depends_on=young),  # from a pruned job
            JobDependency(job=waiting[1], depends_on=young),  # neither pruned
        ]
    )
    with statements_sent() as sent:
        assert prune(max_batches=1) == 3
    driver = get_driver()
    if driver.deletes_in_one_statement:  # (a savepoint around it: the test's transaction)
        assert len([sql for sql, _ in sent if "SAVEPOINT" not in sql]) == 1, sent
    else:  # the pick and, on MariaDB, the lock; no read of the jobs by id to delete them by
        selects = [sql for sql, _ in sent if sql.startswith("SELECT")]
        assert len(selects) == 1 + driver.supports_skip_locked, selects
    assert left(*old, young, *waiting) == {young.pk, *(job.pk for job in waiting)}
    assert list(Attempt.objects.values_list("job_id", flat=True)) == [young.pk]
    links = JobDependency.objects.values_list("job_id", "depends_on_id")
    assert list(links) == [(waiting[1].pk, young.pk)]


def test_a_receiver_of_a_jobs_delete_hears_each_pruned_job():
    """Django's cascade sends the delete signals, one statement a batch would not: with a
    receiver connected, the batch is deleted Django's way."""
    pruned = finished(JobStatus.SUCCEEDED, 10 * DAY, count=3)
    heard: list[int] = []

    def receiver(sender: Any, instance: Job, **kwargs: Any) -> None:
        heard.append(instance.pk)

    post_delete.connect(receiver, sender=Job)
    try:
        assert cascades("default") is None
        assert prune() == 3
    finally:
        post_delete.disconnect(receiver, sender=Job)
    assert sorted(heard) == sorted(job.pk for job in pruned)
    assert cascades("default") == [
        Cascade(JobDependency._meta.db_table, ("job_id", "depends_on_id")),
        Cascade(Attempt._meta.db_table, ("job_id",)),
    ]


def test_the_leaders_pruning_pass_says_when_it_used_its_whole_budget(worker, monkeypatch):
    """Then more is past its retention, and the next pass comes sooner (the leader's
    chores): pruning keeps up with the jobs that finish."""
    from django_jobs.worker.leader import maintainer as maintainer_module

    monkeypatch.setattr(maintainer_module, "PRUNE_BATCH", 2)
    monkeypatch.setattr(maintainer_module, "PRUNE_BATCHES", 2)
    finished(JobStatus.SUCCEEDED, 10 * DAY, count=5)
    maintainer = worker().maintainer
    assert maintainer.prune(START) == 4
    assert maintainer.prune_behind
    assert maintainer.prune(START) == 1
    assert not maintainer.prune_behind
