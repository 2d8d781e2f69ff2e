"""One conformance suite for whichever claimer the database under test uses."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_jobs.claims import get_claimer
from django_jobs.models import Attempt, Job, JobStatus
from tests.conftest import START

pytestmark = pytest.mark.django_db

LEASE = 60


def claim(limit=1, queue="default", owner="w1", now=START):
    return get_claimer().claim(queue, owner, now, LEASE, limit)


def test_claim_takes_a_due_job_and_starts_its_attempt(make_job):
    job = make_job(payload={"a": 1})
    [claimed] = claim()
    assert (claimed.id, claimed.attempt, claimed.attempts_used, claimed.owner) == (
        job.pk,
        1,
        1,
        "w1",
    )
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    assert job.lease_owner == "w1"
    assert job.lease_expires_at == START + timedelta(seconds=LEASE)
    assert (job.attempt, job.attempts_used) == (1, 1)
    attempt = Attempt.objects.get(job=job)
    assert (attempt.number, attempt.owner, attempt.outcome) == (1, "w1", None)
    assert claim() == []


def test_claim_order_is_priority_then_run_at_then_id(make_job):
    late = make_job(run_at=START - timedelta(minutes=1))
    early = make_job(run_at=START - timedelta(minutes=5))
    urgent = make_job(run_at=START, priority=10)
    same_time = make_job(run_at=START - timedelta(minutes=5))
    order = [c.id for c in claim(limit=10)]
    assert order == [urgent.pk, early.pk, same_time.pk, late.pk]


def test_claim_skips_future_other_queue_finished_and_exhausted_jobs(make_job):
    make_job(run_at=START + timedelta(seconds=1))
    make_job(queue="other")
    make_job(status=JobStatus.SUCCEEDED)
    make_job(status=JobStatus.RUNNING, lease_owner="x", lease_expires_at=START)
    make_job(attempts_used=3, max_attempts=3)
    assert claim(limit=10) == []
    assert [c.queue for c in claim(queue="other")] == ["other"]


def test_claim_respects_the_limit(make_job):
    for _ in range(5):
        make_job()
    assert len(claim(limit=3)) == 3
    assert len(claim(limit=3)) == 2


def test_claim_attempt_numbers_continue_after_earlier_attempts(make_job):
    job = make_job(attempt=4, attempts_used=1, max_attempts=5)
    [claimed] = claim()
    assert (claimed.attempt, claimed.attempts_used) == (5, 2)
    assert Attempt.objects.get(job=job).number == 5


def test_claim_query_count_is_bounded(make_job, django_assert_max_num_queries):
    for _ in range(10):
        make_job()
    # read, mark running, insert attempts, plus transaction control; not one per job
    with django_assert_max_num_queries(16):
        assert len(claim(limit=10)) == 10


@pytest.mark.django_db(transaction=True)
def test_claim_concurrent_claimers_never_take_one_job_twice(make_job):
    jobs = [make_job() for _ in range(60)]
    claimed: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def run(owner: str) -> None:
        try:
            barrier.wait()
            while True:
                got = claim(limit=3, owner=owner)
                if not got:
                    if not Job.objects.filter(status=JobStatus.PENDING).exists():
                        return
                    continue
                with lock:
                    claimed.extend(c.id for c in got)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sorted(claimed) == sorted(job.pk for job in jobs)
    assert Attempt.objects.count() == 60


def _plan(sql: str, params: list) -> str:
    with connection.cursor() as cursor:
        if connection.features.has_select_for_update_skip_locked:
            cursor.execute("ANALYZE django_jobs_job")
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("ANALYZE")
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join(" ".join(str(c) for c in row) for row in cursor.fetchall())


def test_claim_plan_seeks_the_partial_index_without_a_sort(make_job):
    finished = [
        Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
        for _ in range(3000)
    ]
    Job.objects.bulk_create(finished)
    for n in range(20):
        make_job(priority=n % 3)
        make_job(queue="other")
    claimer = get_claimer()
    sql, params = claimer.candidate_sql("default", START, 5)
    if connection.features.has_select_for_update_skip_locked:
        sql += " FOR UPDATE SKIP LOCKED"
    plan = _plan(sql, params)
    assert "django_jobs_claim_idx" in plan, plan
    assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan
    assert "Seq Scan" not in plan and "SCAN django_jobs_job" not in plan, plan


def test_claim_sends_the_statement_whose_plan_is_checked(make_job):
    make_job()
    sql, _ = get_claimer().candidate_sql("default", START, 1)
    with CaptureQueriesContext(connection) as context:
        claim()
    head = sql.split(" WHERE")[0]
    sent = [q["sql"] for q in context.captured_queries if q["sql"].startswith(head)]
    assert len(sent) == 1
    assert f"status{connection.ops.quote_name('')[-1:]} = 'pending'" in sent[0]


@pytest.mark.guarded_update
def test_guarded_update_skips_a_row_that_changed_since_it_was_read(make_job):
    """The UPDATE repeats every condition of the read: a stale candidate is not claimed."""
    make_job()
    claimer = get_claimer()
    [stale_row] = claimer.read_candidates("default", START, 1)
    [first] = claim(owner="w1")
    expires = START + timedelta(seconds=LEASE)
    assert claimer._claim_row(stale_row, "default", "w2", START, expires) is False
    job = Job.objects.get(pk=first.id)
    assert (job.lease_owner, job.attempt, job.attempts_used) == ("w1", 1, 1)


@pytest.mark.guarded_update
@pytest.mark.django_db(transaction=True)
def test_guarded_update_claim_takes_the_write_lock_up_front(make_job):
    """A claim's transaction starts with BEGIN IMMEDIATE whatever the connection's mode."""
    make_job()
    connection.ensure_connection()
    saved = connection.transaction_mode
    connection.transaction_mode = None  # as with DATABASES OPTIONS left at their default
    try:
        with CaptureQueriesContext(connection) as context:
            claim()
        assert connection.transaction_mode is None  # restored after the claim
    finally:
        connection.transaction_mode = saved
    assert context.captured_queries[0]["sql"] == "BEGIN IMMEDIATE"


@pytest.mark.django_db(transaction=True)
def test_claim_that_fails_uses_up_no_attempt(make_job):
    """The claim and its attempt rows commit together, or not at all."""
    from django.db import IntegrityError

    job = make_job()
    Attempt.objects.create(job=job, number=1, owner="ghost", started_at=START)  # number 1 taken
    with pytest.raises(IntegrityError):
        claim()
    job.refresh_from_db()
    assert (job.status, job.attempts_used, job.attempt, job.lease_owner) == ("pending", 0, 0, None)
