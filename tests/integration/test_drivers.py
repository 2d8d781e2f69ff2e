"""One conformance suite for the driver of the database under test: claim, settle, renew."""

import dataclasses
import json
import threading
from contextlib import ExitStack
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_jobs import schedule_job
from django_jobs.db import ROW_ERRORS, ClaimRequest, get_driver
from django_jobs.db.records import LANE_WINDOW, QueueLimits, Renewal, RenewRow
from django_jobs.models import Attempt, Job, JobStatus
from tests.conftest import START
from tests.support.plans import analyze, explain, mysql_plan, postgresql_plan, scans, sorts
from tests.support.threads import race
from tests.support.triggers import ordered_status_writes, refusing

pytestmark = pytest.mark.django_db

LEASE = 60
# SQLite: begin, read, one UPDATE ... RETURNING, one INSERT of the attempts, commit.
# MariaDB/MySQL: begin, the locking read, one UPDATE, one INSERT of the attempts, commit.
STATEMENTS_PER_CLAIM = {"postgresql": 1, "sqlite": 5, "mysql": 5}


def request(limit=1, queue="default", owner="w1", now=START, lease=LEASE):
    return ClaimRequest(queue, owner, now, lease, limit)


def claim(limit=1, queue="default", owner="w1", now=START):
    return get_driver().claim(request(limit, queue, owner, now))


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


def test_claim_reads_each_jobs_run_at_to_the_microsecond(make_job):
    # On PostgreSQL the hot cursor reads timestamps with psycopg's compiled loader, not
    # Django's pure-Python one (6 µs a value: one a job claimed).
    run_at = START - timedelta(minutes=3, microseconds=123_457)
    job = make_job(run_at=run_at)
    [claimed] = claim()
    assert (claimed.id, claimed.run_at, claimed.waited) == (job.pk, run_at, 180.123457)
    if connection.vendor == "postgresql":
        from django.db.backends.postgresql.psycopg_any import BaseTzLoader

        with get_driver().hot_cursor() as cursor:
            loader = cursor.cursor.adapters.get_loader(1184, 0)  # timestamptz, as text
        assert not issubclass(loader, BaseTzLoader)


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


@pytest.mark.django_db(transaction=True)  # outside a transaction, as a worker claims
@pytest.mark.parametrize("batch", [1, 10])
def test_claim_query_count_does_not_grow_with_the_batch(make_job, django_assert_num_queries, batch):
    for _ in range(batch):
        make_job()
    # PostgreSQL: one statement that selects, marks running and inserts the attempts.
    with django_assert_num_queries(STATEMENTS_PER_CLAIM[connection.vendor]):
        assert len(claim(limit=batch)) == batch


#: A claim of 3 by ``owner``: the plain claim, and a lane's (whose window is read without a
#: lock, then each row locked and checked again on its newest version).
CLAIMS = {
    "plain": lambda owner: request(3, owner=owner),
    "lane": lambda owner: dataclasses.replace(lane(3, names=AMONG), owner=owner),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("way", sorted(CLAIMS))
def test_claim_concurrent_claimers_never_take_one_job_twice(make_job, way):
    jobs = [make_job() for _ in range(60)]
    claimed: list[int] = []
    lock = threading.Lock()

    def run(owner: str) -> None:
        while True:
            got = get_driver().claim(CLAIMS[way](owner))
            if not got:
                if not Job.objects.filter(status=JobStatus.PENDING).exists():
                    return
                continue
            with lock:
                claimed.extend(c.id for c in got)

    assert race([f"w{i}" for i in range(4)], run) == []
    assert sorted(claimed) == sorted(job.pk for job in jobs)
    assert Attempt.objects.count() == 60


@pytest.mark.parametrize("names", [None, ("tests.ok", "tests.also")], ids=["any", "named"])
def test_claim_plan_seeks_the_partial_index_without_a_sort(make_job, names):
    finished = [
        Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
        for _ in range(3000)
    ]
    Job.objects.bulk_create(finished)
    for n in range(20):
        make_job(priority=n % 3)
        make_job(queue="other")
        make_job(name="tests.unknown")
    sql, params = get_driver().claim_statement(dataclasses.replace(request(5), names=names))
    plan = explain(sql, params)
    assert "django_jobs_claim_idx" in plan, plan
    assert not sorts(plan), plan
    assert not scans(plan, "django_jobs_job"), plan


def test_claim_update_probes_the_attempt_index_without_a_scan(make_job):
    """Numbering after the highest attempt costs one index probe per claimed row."""
    finished = Job.objects.bulk_create(
        Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
        for _ in range(1000)
    )
    Attempt.objects.bulk_create(
        Attempt(job=job, number=n, owner="old", started_at=START)
        for job in finished
        for n in (1, 2)
    )
    ids = [make_job().pk for _ in range(5)]
    driver = get_driver()
    if connection.vendor != "sqlite":  # the claim's statement (PostgreSQL) or read numbers them
        sql, params = driver.claim_statement(request(5))
    else:
        sql, params = driver.mark_running_sql(ids, request(5, lease=0))
    plan = explain(sql, params)
    assert "django_jobs_attempt" in plan, plan
    for table in ("django_jobs_job", "django_jobs_attempt"):
        assert not scans(plan, table), plan


def test_claim_sends_the_statement_whose_plan_is_checked(make_job):
    make_job()
    sql, _ = get_driver().claim_statement(request(1))
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
    claimer = get_driver()
    [stale_row] = claimer.read_candidates(request(1))
    [first] = claim(owner="w1")
    assert claimer.take([stale_row], request(1, owner="w2")) == []
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


@pytest.fixture
def refuse_attempts():
    """Make the database refuse attempt rows for the given job ids, as a constraint would.

    A trigger stands in for whatever else could make one row's claim fail: the claim
    must skip that row, log it, and still claim the others.
    """
    with ExitStack() as stack:

        def refuse(*job_ids: int) -> None:
            ids = ", ".join(str(int(job_id)) for job_id in job_ids)
            stack.enter_context(
                refusing(
                    "test_refuse_attempt", "INSERT", "django_jobs_attempt", f"NEW.job_id IN ({ids})"
                )
            )

        yield refuse


@pytest.mark.django_db(transaction=True)
def test_claim_that_fails_uses_up_no_attempt(make_job, refuse_attempts):
    """A row whose claim fails is left as it was: its attempt row and its update go together."""
    job = make_job()
    refuse_attempts(job.pk)
    assert claim() == []
    job.refresh_from_db()
    assert (job.status, job.attempts_used, job.attempt, job.lease_owner) == ("pending", 0, 0, None)
    assert not Attempt.objects.exists()


# -- rows edited by hand ----------------------------------------------------


def test_claim_numbers_a_hand_reset_job_after_its_highest_attempt(make_job, worker):
    """An operator set a finished job back to pending with attempt 0: attempts 1-3 exist."""
    job = make_job(status=JobStatus.SUCCEEDED, attempt=3, attempts_used=3, max_attempts=3)
    for number in (1, 2, 3):
        Attempt.objects.create(
            job=job, number=number, owner="old", started_at=START, outcome="succeeded"
        )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PENDING, attempt=0, attempts_used=0)
    result = worker().run_once()
    assert (result.claimed, result.succeeded) == (1, 1)
    job.refresh_from_db()
    assert (job.status, job.attempt, job.attempts_used) == ("succeeded", 4, 1)
    assert list(job.attempts.values_list("number", "outcome")) == [
        (1, "succeeded"),
        (2, "succeeded"),
        (3, "succeeded"),
        (4, "succeeded"),
    ]


def test_claim_attempt_numbers_keep_the_job_counter_when_it_is_ahead(make_job):
    job = make_job(attempt=7)
    Attempt.objects.create(job=job, number=2, owner="old", started_at=START)
    [claimed] = claim()
    assert claimed.attempt == 8
    assert sorted(job.attempts.values_list("number", flat=True)) == [2, 8]


@pytest.mark.django_db(transaction=True)
def test_claim_skips_a_row_that_cannot_be_claimed_and_takes_the_others(
    make_job, refuse_attempts, caplog
):
    bad = make_job(priority=10)  # first in claim order
    good = [make_job() for _ in range(3)]
    refuse_attempts(bad.pk)
    refused: list[tuple[int, bool]] = []

    def claim_telling(limit):
        told = dataclasses.replace(
            request(limit), refused=lambda i, e: refused.append((i, isinstance(e, ROW_ERRORS)))
        )
        return [c.id for c in get_driver().claim(told)]

    with caplog.at_level("DEBUG", logger="django_jobs"):
        assert claim_telling(1) == [good[0].pk]
        assert claim_telling(5) == [good[1].pk, good[2].pk]
    assert refused == [(bad.pk, True), (bad.pk, True)]
    assert [r for r in caplog.records if r.levelname != "DEBUG"] == []  # the caller reports it
    bad.refresh_from_db()
    assert (bad.status, bad.attempt, bad.attempts_used) == ("pending", 0, 0)
    assert Attempt.objects.filter(job_id=bad.pk).count() == 0


@pytest.mark.django_db(transaction=True)
def test_claim_unclaimable_row_does_not_stop_the_worker(make_job, refuse_attempts, worker, caplog):
    bad = make_job(priority=10)
    good = [make_job() for _ in range(3)]
    refuse_attempts(bad.pk)
    w = worker()
    with caplog.at_level("WARNING", logger="django_jobs.events"):
        for _ in range(3):
            assert w.run_once().succeeded == 1
        assert w.run_once().claimed == 0
    failed = [r for r in caplog.records if getattr(r, "event", "") == "job_claim_failed"]
    assert failed and {r.job_id for r in failed} == {bad.pk}
    assert failed[0].getMessage().startswith(f"job #{bad.pk} cannot be claimed, skipped: ")
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {bad.pk: "pending", **{job.pk: "succeeded" for job in good}}


def test_claim_row_whose_attempt_counter_overflows_does_not_block_the_others(make_job):
    """On PostgreSQL the next number no longer fits the column; elsewhere it is claimed."""
    top = make_job(attempt=2**31 - 1, priority=10)
    other = make_job()
    claimed = {c.id for c in claim(limit=2)}
    assert other.pk in claimed
    if connection.vendor == "postgresql":
        assert top.pk not in claimed


def test_claim_takes_a_pending_row_that_still_has_a_lease_owner(make_job):
    """A running job set back to pending by hand keeps its owner; it is claimed like any."""
    job = make_job(lease_owner="gone-worker", lease_expires_at=START - timedelta(hours=1))
    [claimed] = claim(owner="w2")
    assert claimed.id == job.pk
    job.refresh_from_db()
    assert (job.status, job.lease_owner) == ("running", "w2")


def test_claim_pending_row_with_a_lease_owner_does_not_stall_the_rows_behind(make_job):
    stale = make_job(priority=5, lease_owner="gone-worker")
    behind = make_job()
    assert [c.id for c in claim(limit=1)] == [stale.pk]
    assert [c.id for c in claim(limit=1)] == [behind.pk]


# -- settle, renew, claim and settle: every write after the claim is fenced -------

# SQLite: begin, jobs, attempts, commit.
# MariaDB/MySQL: begin, lock the jobs, jobs, attempts, commit.
STATEMENTS_PER_SETTLE = {"postgresql": 1, "sqlite": 4, "mysql": 5}


def succeeded(job, now=START, **changes):
    from django_jobs.models import AttemptOutcome
    from django_jobs.outcomes import HandlerResult, decide
    from django_jobs.retry_policy import RetryPolicy

    job = dataclasses.replace(job, **changes)
    return decide(job, HandlerResult(AttemptOutcome.SUCCEEDED), now, RetryPolicy())


def test_driver_settle_batch_writes_the_others_and_returns_the_one_fenced_out(make_job):
    for _ in range(3):
        make_job()
    first, second, third = claim(limit=3)
    fenced_out = succeeded(second, owner="someone-else")
    settled = get_driver().settle([succeeded(first), fenced_out, succeeded(third)])
    assert settled.lost == [fenced_out]
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {first.id: "succeeded", second.id: "running", third.id: "succeeded"}
    outcomes = dict(Attempt.objects.values_list("job_id", "outcome"))
    assert outcomes == {first.id: "succeeded", second.id: None, third.id: "succeeded"}


def test_driver_settle_batch_writes_each_settlements_own_times(make_job):
    # A batch's outcomes mostly share one moment, formatted once (PostgreSQL's JSON); those
    # that do not keep their own, to the microsecond.
    for _ in range(3):
        make_job()
    first, second, third = claim(limit=3)
    later = START + timedelta(seconds=5, microseconds=7)
    retry_at = START + timedelta(minutes=2, microseconds=999_999)
    due_again = dataclasses.replace(succeeded(second), status=JobStatus.PENDING, run_at=retry_at)
    settlements = [succeeded(first), due_again, succeeded(third, now=later)]
    assert get_driver().settle(settlements).lost == []
    rows = Job.objects.in_bulk([first.id, second.id, third.id])
    assert (rows[first.id].finished_at, rows[third.id].finished_at) == (START, later)
    assert (rows[second.id].status, rows[second.id].run_at) == (JobStatus.PENDING, retry_at)
    ended = dict(Attempt.objects.values_list("job_id", "finished_at"))
    assert ended == {first.id: START, second.id: START, third.id: later}


def test_driver_settle_a_stale_attempt_changes_nothing(make_job):
    make_job()
    [job] = claim()
    stale = succeeded(job, attempt=job.attempt - 1)
    assert get_driver().settle([stale]).lost == [stale]
    assert Job.objects.get(pk=job.id).status == JobStatus.RUNNING


@pytest.mark.django_db(transaction=True)  # outside a transaction, as the settler writes
@pytest.mark.parametrize("batch", [1, 20])
def test_driver_settle_batch_costs_the_same_statements_for_1_or_20(
    make_job, django_assert_num_queries, batch
):
    for _ in range(batch):
        make_job()
    settlements = [succeeded(job) for job in claim(limit=batch)]
    with django_assert_num_queries(STATEMENTS_PER_SETTLE[connection.vendor]):
        assert get_driver().settle(settlements).lost == []
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == batch


def running_elsewhere(make_job, count, mine, statistics="fresh"):
    """``count`` jobs running for another worker, ``mine`` claimed by ``w1``; analyzed
    (``fresh``), or (``stale``) with the statistics of a table of finished jobs, taken
    before any of them ran, as autovacuum's last ANALYZE may have left them."""
    if statistics == "stale":
        Job.objects.bulk_create(
            Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
            for _ in range(3000)
        )
        analyze()
    Job.objects.bulk_create(
        Job(
            name="tests.ok",
            status=JobStatus.RUNNING,
            lease_owner="another",
            lease_expires_at=START + timedelta(hours=1),
            attempt=1,
            attempts_used=1,
            run_at=START,
            created_at=START,
        )
        for _ in range(count)
    )
    for _ in range(mine):
        make_job()
    claimed = claim(limit=mine)
    if statistics == "fresh":
        analyze()
    return claimed


@pytest.mark.skipif(connection.vendor == "postgresql", reason="SQLite's and MariaDB's plans")
def test_settle_finds_its_rows_by_primary_key_however_many_jobs_run(make_job):
    """SQLite's and MariaDB's settle, from a table of bound values the planner counts
    right, reads each of its rows through the primary key (PostgreSQL's: below)."""
    claimed = running_elsewhere(make_job, 2000, mine=16)
    sql, params = get_driver().settle_jobs_sql([succeeded(job) for job in claimed])
    if connection.vendor == "sqlite":
        plan = explain(sql, params)
        assert "SEARCH t USING INTEGER PRIMARY KEY" in plan and not scans(plan, "t"), plan
    else:
        [read] = [row for row in mysql_plan(sql, params) if row["table"] == "t"]
        assert (read["type"], read["key"]) == ("eq_ref", "PRIMARY"), read


@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's reads by id")
@pytest.mark.parametrize("operation", ["renew", "settle", "claim"])
def test_mariadb_reads_a_worker_s_own_rows_by_primary_key_however_many_jobs_run(
    make_job, operation
):
    """What MariaDB's driver reads of a worker's own rows by id (the renewal's locking
    read, the settle's, the claim's read-back) goes through the primary key: with the
    status among the conditions, and statistics taken before the jobs ran, the optimizer
    read the lease index's entries of every running job instead, locking each in passing
    where the read locks. Each statement is explained as the driver sent it."""
    claimed = running_elsewhere(make_job, 2000, mine=16, statistics="stale")
    driver = get_driver()
    with CaptureQueriesContext(connection) as sent:
        if operation == "renew":
            held = [(job.id, job.attempt) for job in claimed]
            assert len(driver.renew("w1", held, START, LEASE, 5.0).renewed) == 16
        elif operation == "settle":
            assert driver.settle([succeeded(job) for job in claimed]).lost == []
        else:
            for _ in range(16):
                make_job()
            assert len(claim(limit=16)) == 16
    by_id = [q["sql"] for q in sent.captured_queries if "`id` IN (" in q["sql"]]
    assert by_id, [q["sql"] for q in sent.captured_queries]
    for sql in by_id:
        reads = [row for row in mysql_plan(sql, []) if row["table"] == "django_jobs_job"]
        assert reads and all(row["key"] == "PRIMARY" for row in reads), (sql, reads)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
@pytest.mark.parametrize("kind", ["custom", "generic"])
@pytest.mark.parametrize("statistics", ["fresh", "stale"])
@pytest.mark.parametrize("statement", ["settle", "renew"])
def test_settle_and_renew_find_their_rows_by_primary_key_however_many_jobs_run(
    make_job, statement, statistics, kind
):
    """A worker's settle and lease renewal read its own rows through the primary key, not
    every running job (a cost that would grow with the jobs other workers run). The
    settle's rows come from a function the planner counts as 100, for which, in a table
    of a few thousand rows, a hash of the running rows looked cheaper; and with
    statistics taken while no job ran, the lease index (of running jobs) looked all but
    empty, so both statements read all of it."""
    claimed = running_elsewhere(make_job, 2000, mine=16, statistics=statistics)
    later = START + timedelta(hours=1)
    driver = get_driver()
    if statement == "settle":
        sql, params = driver.settle_statement([succeeded(job) for job in claimed])
    else:
        rows = [RenewRow(job.id, job.attempt, None) for job in claimed]
        sql, params = driver.renew_sql(Renewal("w1", rows, START, later, 5.0))
    plan = postgresql_plan(sql, params, kind)
    assert "django_jobs_job_pkey on django_jobs_job j" in plan, plan
    assert "django_jobs_lease_idx" not in plan, plan
    assert not scans(plan, "django_jobs_job"), plan


@pytest.mark.django_db(transaction=True)
def test_driver_claim_and_settle_writes_both_in_one_statement_on_postgresql(
    make_job, django_assert_num_queries
):
    for _ in range(6):
        make_job()
    done = [succeeded(job) for job in claim(limit=3)]
    statements = {"postgresql": 1, "sqlite": 7, "mysql": 8}[connection.vendor]
    with django_assert_num_queries(statements):
        claimed, settled = get_driver().claim_and_settle(request(3), done)
    assert settled.lost == [] and len(claimed) == 3
    assert {c.id for c in claimed}.isdisjoint(s.job_id for s in done)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 3
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 3


@pytest.mark.django_db(transaction=True)  # a trigger on MariaDB commits the transaction
def test_driver_claim_and_settle_settles_before_it_claims(make_job):
    """A claim may lock a row it does not take. Reading through a snapshot older than
    another claim's commit, it finds a row that claim just took as still pending, and
    locks its newest version before its recheck passes over it (PostgreSQL's READ
    COMMITTED keeps that lock to the end of the statement). Had the claim settled after
    it locked, that other worker's next claim, settling the row, would wait on it while
    this one's settle waited on a row the other locked the same way: a deadlock, seen in
    two loops of the driver's statement (bench/peers/run_raw.py, three runs of six at
    20,000 jobs). So each way of settling and claiming at once settles first: every
    job row it settles is written before any it claims."""
    for _ in range(4):
        make_job()
    done = [succeeded(job) for job in claim(limit=2)]
    with ordered_status_writes() as written:
        claimed, settled = get_driver().claim_and_settle(request(2), done)
        assert written() == ["succeeded", "succeeded", "running", "running"]
    assert settled.lost == [] and len(claimed) == 2


def test_driver_claim_and_settle_returns_the_settlements_fenced_out(make_job):
    for _ in range(2):
        make_job()
    [job] = claim()
    fenced_out = succeeded(job, owner="someone-else")
    claimed, settled = get_driver().claim_and_settle(request(1), [fenced_out])
    assert settled.lost == [fenced_out] and len(claimed) == 1
    assert Job.objects.get(pk=job.id).status == JobStatus.RUNNING


# How an attempt can end, as decide() makes it; the job has max_attempts=3 and used one.
ENDINGS = {
    "failed": ("failed", "RuntimeError: boom"),
    "timed_out": ("timed_out", "TimedOut: ran past its timeout"),
    "released": ("released", None),  # released() says why
    "last_failure": ("failed", "RuntimeError: the last one"),
}


def ended(job, kind, now=START):
    from django_jobs.models import AttemptOutcome
    from django_jobs.outcomes import HandlerResult, decide, released
    from django_jobs.retry_policy import RetryPolicy

    outcome, error = ENDINGS[kind]
    if kind == "released":
        return released(job.id, job.owner, job.attempt, now)
    if kind == "last_failure":
        job = dataclasses.replace(job, attempts_used=job.max_attempts)
    return decide(job, HandlerResult(AttemptOutcome(outcome), error), now, RetryPolicy())


@pytest.mark.parametrize("way", ["settle", "claim_and_settle"])
@pytest.mark.parametrize("kind", sorted(ENDINGS))
def test_driver_settle_ends_a_job_with_a_cancel_request_cancelled_whatever_its_attempt_did(
    make_job, way, kind
):
    """cancel_job() asked after the last renewal that could carry it: honoured at the settle."""
    job_row = make_job(max_attempts=3)
    [job] = claim()
    Job.objects.filter(pk=job.id).update(cancel_requested_at=START)
    later = START + timedelta(seconds=5)
    settlement = ended(job, kind, later)
    assert settlement.status != JobStatus.CANCELLED  # what the worker decided without it
    if way == "settle":
        settled = get_driver().settle([settlement])
    else:
        _, settled = get_driver().claim_and_settle(request(1, now=later), [settlement])
    assert settled.lost == [] and settled.cancelled == {job.pair}
    job_row.refresh_from_db()
    assert (job_row.status, job_row.finished_at) == (JobStatus.CANCELLED, later)
    assert (job_row.lease_owner, job_row.last_error) == (None, settlement.error)
    attempt = job_row.attempts.get()  # the attempt keeps what it did
    assert (attempt.outcome, attempt.error) == (ENDINGS[kind][0], settlement.error)
    assert settlement.error.startswith(ENDINGS[kind][1] or "Released: ")
    assert claim(now=later + timedelta(days=1)) == []  # never run again


@pytest.mark.parametrize("way", ["settle", "claim_and_settle"])
def test_driver_settle_writes_each_attempts_traceback_and_none_for_a_success(make_job, way):
    from django_jobs.models import AttemptOutcome
    from django_jobs.outcomes import HandlerResult, decide
    from django_jobs.retry_policy import RetryPolicy

    make_job(max_attempts=3)
    make_job(max_attempts=3)
    failing, passing = claim(limit=2)
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n'
    result = HandlerResult(AttemptOutcome.FAILED, "RuntimeError: boom", trace)
    settlements = [decide(failing, result, START, RetryPolicy()), succeeded(passing)]
    if way == "settle":
        get_driver().settle(settlements)
    else:
        get_driver().claim_and_settle(request(1), settlements)
    traces = dict(Attempt.objects.values_list("job_id", "traceback"))
    assert traces == {failing.id: trace, passing.id: ""}


# Text a settle must write as it is given: quotes, backslashes, braces and commas (an
# array's syntax), JSON's own escapes, a word that reads as NULL, lines, non-ASCII.
AWKWARD = 'RuntimeError: "q" \\ \\" {a,b} [1] NULL \\u0041 \t\n\u00e9\u65e5\U0001f600 \''


@pytest.mark.parametrize("way", ["settle", "claim_and_settle"])
def test_driver_settle_writes_every_value_as_given_to_the_microsecond(make_job, way):
    from datetime import timezone as tz

    from django_jobs.models import AttemptOutcome
    from django_jobs.outcomes import HandlerResult, decide
    from django_jobs.retry_policy import RetryPolicy

    make_job(max_attempts=3)
    make_job(max_attempts=3)
    failing, passing = claim(limit=2)
    ended_at = (START + timedelta(microseconds=123457)).astimezone(tz(timedelta(hours=-7)))
    run_at = START + timedelta(minutes=5, microseconds=999999)
    result = HandlerResult(AttemptOutcome.FAILED, AWKWARD, AWKWARD * 2)
    retried = dataclasses.replace(
        decide(failing, result, START, RetryPolicy()), run_at=run_at, ended_at=ended_at
    )
    stored = json.dumps({"text": AWKWARD, "n": [1, 2.5, None]})
    done = dataclasses.replace(
        succeeded(passing), result=stored, ended_at=ended_at, finished_at=ended_at
    )
    assert retried.status == JobStatus.PENDING and retried.error == AWKWARD
    if way == "settle":
        settled = get_driver().settle([retried, done])
    else:
        _, settled = get_driver().claim_and_settle(request(1), [retried, done])
    assert settled.lost == []
    jobs = {job.id: job for job in Job.objects.all()}
    assert (jobs[failing.id].status, jobs[failing.id].run_at) == (JobStatus.PENDING, run_at)
    assert jobs[failing.id].last_error == AWKWARD
    assert jobs[passing.id].finished_at == ended_at
    assert jobs[passing.id].result == {"text": AWKWARD, "n": [1, 2.5, None]}
    attempts = {a.job_id: a for a in Attempt.objects.all()}
    assert (attempts[failing.id].error, attempts[failing.id].traceback) == (AWKWARD, AWKWARD * 2)
    assert attempts[failing.id].finished_at == ended_at
    assert (attempts[passing.id].outcome, attempts[passing.id].error) == ("succeeded", "")


def test_driver_settle_a_success_after_a_cancel_request_stays_a_success(make_job):
    make_job()
    [job] = claim()
    Job.objects.filter(pk=job.id).update(cancel_requested_at=START)
    settled = get_driver().settle([succeeded(job)])
    assert settled.lost == [] and settled.cancelled == frozenset()
    assert Job.objects.get(pk=job.id).status == JobStatus.SUCCEEDED


def test_driver_renew_writes_progress_of_the_jobs_that_reported(make_job):
    from django_jobs.progress import Progress

    for _ in range(3):
        make_job()
    first, second, other = claim(limit=3)
    driver = get_driver()
    later = START + timedelta(seconds=10)
    reports = {first.id: Progress(3, 10, "copying"), other.id: Progress(1, None, "")}
    renewed = driver.renew("w1", [first.pair, second.pair], later, LEASE, progress=reports)
    assert renewed.renewed == {first.id, second.id}
    rows = Job.objects.in_bulk([first.id, second.id, other.id])
    assert (rows[first.id].progress_done, rows[first.id].progress_total) == (3, 10)
    assert rows[first.id].progress_note == "copying"
    assert rows[second.id].progress_done is None  # renewed, nothing reported
    assert rows[other.id].progress_done is None  # reported, but not in this renewal
    driver.renew("w1", [first.pair], later, LEASE)  # a renewal with nothing new keeps it
    assert Job.objects.get(pk=first.id).progress_done == 3
    # Fenced like the lease: a renewal that does not hold the job writes no progress.
    driver.renew(
        "someone-else",
        [second.pair],
        later,
        LEASE,
        progress=reports | {second.id: Progress(9, 9, "x")},
    )
    assert Job.objects.get(pk=second.id).progress_done is None


def test_driver_renew_extends_only_the_leases_still_held(make_job):
    for _ in range(3):
        make_job()
    mine, stale, other = claim(limit=3)
    driver = get_driver()
    later = START + timedelta(seconds=10)
    held = [mine.pair, (stale.id, stale.attempt - 1), other.pair]
    renewed, expires, cancel_requested = driver.renew("w1", held[:2], later, LEASE)
    assert renewed == {mine.id} and expires == later + timedelta(seconds=LEASE)
    assert cancel_requested == set()
    assert driver.renew("someone-else", [other.pair], later, LEASE)[0] == set()
    expiries = dict(Job.objects.values_list("id", "lease_expires_at"))
    assert expiries[mine.id] == expires
    assert expiries[stale.id] == expiries[other.id] == START + timedelta(seconds=LEASE)


def test_driver_declares_what_its_database_can_do():
    """The rest of the code reads these instead of the vendor's name."""
    driver = get_driver()
    features = connection.features
    assert driver.supports_skip_locked == features.has_select_for_update_skip_locked
    assert driver.supports_listen == (connection.vendor == "postgresql")
    assert driver.claims_in_one_statement == (STATEMENTS_PER_CLAIM[connection.vendor] == 1)
    assert driver.cuts_off_calls == (connection.vendor != "sqlite")


@pytest.mark.django_db(transaction=True)
def test_driver_statements_are_logged_once_query_logging_is_switched_on(make_job):
    # The hot path keeps its cursor on the connection: one made while logging was off
    # must not hide the statements from a query log switched on afterwards.
    make_job()
    assert claim() and not connection.queries_logged
    make_job()
    with CaptureQueriesContext(connection) as queries:
        assert claim()
    assert any("django_jobs_attempt" in query["sql"] for query in queries.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_driver_statements_work_on_a_connection_opened_again(make_job):
    make_job()
    assert claim()
    connection.close()  # as a worker's guard does after an error; the next call reconnects
    make_job()
    assert claim()


def prepared_inserts() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ['%INSERT INTO "django_jobs_job"%'],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's statements")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prepared", [True, False])
def test_driver_prepares_its_statements_as_prepared_statements_says(make_job, prepared):
    make_job()
    assert claim()  # the hot path's cursor is made, with PREPARED_STATEMENTS on
    with override_settings(DJANGO_JOBS={"PREPARED_STATEMENTS": prepared}):
        schedule_job("tests.ok")
    assert prepared_inserts() == int(prepared)


# -- a claim of the names its worker knows ---------------------------------------------

#: A plain claim, and the claims of a queue with limits (flow control's own statements).
NAMED_CLAIMS = {
    "plain": None,
    "limited": QueueLimits(global_limit=10),
    "keyed": QueueLimits(keyed=True),
}
KNOWN = ("tests.ok", "tests.ünï'côdé")


def named(limit=10, names=KNOWN, limits=None):
    return dataclasses.replace(request(limit), names=names, limits=limits)


@pytest.mark.django_db(transaction=True)  # a limited claim runs in a transaction of its own
@pytest.mark.parametrize("way", ["claim", "claim_and_settle"])
@pytest.mark.parametrize("kind", sorted(NAMED_CLAIMS))
def test_claim_takes_only_the_names_it_is_given_and_leaves_the_others_untouched(
    make_job, kind, way
):
    carried = []
    if way == "claim_and_settle":
        make_job(name="tests.done")
        carried = [succeeded(job) for job in claim()]
    unknown = make_job(name="tests.unknown", priority=9)  # first in the claim order
    known = [make_job(), make_job(name=KNOWN[1])]
    driver = get_driver()
    req = named(limits=NAMED_CLAIMS[kind])
    if way == "claim":
        claimed = driver.claim(req)
    else:
        claimed, settled = driver.claim_and_settle(req, carried)
        assert settled.lost == []
    assert sorted(c.id for c in claimed) == sorted(job.pk for job in known)
    assert [c.name for c in claimed] == ["tests.ok", KNOWN[1]]
    unknown.refresh_from_db()
    assert (unknown.status, unknown.attempts_used, unknown.attempt) == (JobStatus.PENDING, 0, 0)
    assert not Attempt.objects.filter(job=unknown).exists()
    assert driver.claim(named()) == []
    assert [c.id for c in claim()] == [unknown.pk]  # names=None: any name


@pytest.mark.parametrize("kind", sorted(NAMED_CLAIMS))
def test_claim_of_no_names_takes_nothing(make_job, kind):
    make_job()
    assert get_driver().claim(named(names=(), limits=NAMED_CLAIMS[kind])) == []
    assert Job.objects.get().status == JobStatus.PENDING


@pytest.mark.django_db(transaction=True)  # a trigger, on MariaDB
def test_claim_row_by_row_keeps_to_the_names(make_job, refuse_attempts):
    """The claim after a refused write reads with the same names."""
    make_job(name="tests.unknown", priority=9)
    refused = make_job(name="tests.refused")
    good = make_job()
    refuse_attempts(refused.pk)
    claimed = get_driver().claim(named(names=("tests.ok", "tests.refused")))
    assert [c.id for c in claimed] == [good.pk]


#: Parameters the names add to a claim's statement: one (an array, a JSON array) where the
#: database binds a list as one value; one a name in MariaDB's IN list.
NAMES_PARAMS = {"postgresql": 1, "sqlite": 1, "mysql": len(KNOWN)}


def test_claim_statement_binds_the_names_and_its_text_is_built_once():
    driver = get_driver()
    plain_sql, plain = driver.claim_statement(request(5))
    sql, params = driver.claim_statement(named(5))
    assert len(params) - len(plain) == NAMES_PARAMS[connection.vendor]
    assert sql != plain_sql and "ünï" not in sql
    again, _ = driver.claim_statement(named(5, names=("a.b", "c.d")))
    assert again == sql  # other names, as many: the same text
    if driver.names_key(("a",)) == driver.names_key(KNOWN):
        assert driver.claim_statement(named(5, names=("a",)))[0] == sql


@pytest.mark.django_db(transaction=True)
def test_claim_of_names_costs_the_same_statements(make_job, django_assert_num_queries):
    for _ in range(3):
        make_job()
    with django_assert_num_queries(STATEMENTS_PER_CLAIM[connection.vendor]):
        assert len(get_driver().claim(named(3))) == 3


# -- a lane's claim (a worker with sync and async handlers) ------------------------------

LANE = ("tests.lane",)
AMONG = ("tests.ok", "tests.lane")  # the names the worker knows: both lanes'


def lane(limit=10, names=LANE, limits=None):
    return dataclasses.replace(request(limit), names=names, among=AMONG, limits=limits)


@pytest.mark.django_db(transaction=True)  # a limited claim runs in a transaction of its own
@pytest.mark.parametrize("way", ["claim", "claim_and_settle"])
@pytest.mark.parametrize("kind", sorted(NAMED_CLAIMS))
def test_lane_claim_takes_its_names_in_claim_order_and_leaves_the_other_lanes_rows(
    make_job, way, kind
):
    driver = get_driver()
    limits = NAMED_CLAIMS[kind]
    carried = []
    if way == "claim_and_settle":
        make_job(name="tests.done")
        carried = [succeeded(job) for job in claim()]
    other = make_job(priority=9)  # the other lane's, first in the claim order
    unknown = make_job(name="tests.unknown", priority=8)
    first, second = make_job(name="tests.lane", priority=5), make_job(name="tests.lane")
    assert driver.claim(named(names=("tests.nothing",))) == []  # a plain claim of names first
    if way == "claim":
        claimed = driver.claim(lane(limits=limits))
    else:
        claimed, settled = driver.claim_and_settle(lane(limits=limits), carried)
        assert settled.lost == []
    assert [c.id for c in claimed] == [first.pk, second.pk]
    for job in (other, unknown):
        job.refresh_from_db()
        assert (job.status, job.attempts_used) == (JobStatus.PENDING, 0)
    assert [c.id for c in driver.claim(lane(names=("tests.ok",), limits=limits))] == [other.pk]
    assert driver.claim(lane(limits=limits)) == []


def due_rows(clock, count, name, priority, **fields):
    now = clock.now()
    Job.objects.bulk_create(
        Job(
            name=name,
            queue="default",
            payload={},
            run_at=now,
            created_at=now,
            max_attempts=3,
            priority=priority,
            **fields,
        )
        for _ in range(count)
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's lane claim")
@pytest.mark.parametrize("kind", sorted(NAMED_CLAIMS))
def test_lane_claim_looks_at_the_first_lane_window_due_jobs_of_the_names_it_knows(clock, kind):
    """A lane with nothing at the head of its queue reads LANE_WINDOW rows, not the whole
    backlog of the other lane's (which its queue's doorbell would have it read each time
    a job is enqueued); the rows of names the worker does not know do not count."""
    limits = NAMED_CLAIMS[kind]
    due_rows(clock, LANE_WINDOW, "tests.unknown", 9)
    due_rows(clock, LANE_WINDOW - 1, "tests.ok", 5)  # the other lane's
    due_rows(clock, 2, "tests.lane", 1)
    driver = get_driver()
    [taken] = driver.claim(lane(limit=1, limits=limits))  # the last row of the window
    due_rows(clock, 2, "tests.ok", 5)  # the other lane's rows now fill the window
    assert driver.claim(lane(limits=limits)) == []
    others = Job.objects.filter(name="tests.ok").order_by("id").values_list("id", flat=True)
    Job.objects.filter(id__in=list(others[1:])).delete()  # as the other lane takes them
    [behind] = driver.claim(lane(limits=limits))
    assert Job.objects.get(pk=taken.id).name == behind.name == "tests.lane"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's lane claim")
def test_keyed_lane_claim_passes_over_the_rows_of_full_keys_outside_its_window(clock, make_job):
    """A key at its limit holds back its own rows, not the lane's rows of other keys."""
    keyed = NAMED_CLAIMS["keyed"]
    make_job(concurrency_key="full")
    [held] = get_driver().claim(lane(names=("tests.ok",), limits=keyed))
    due_rows(clock, LANE_WINDOW + 5, "tests.lane", 5, concurrency_key="full")
    due_rows(clock, 1, "tests.lane", 1, concurrency_key="free")
    [claimed] = get_driver().claim(lane(limits=keyed))
    assert Job.objects.get(pk=claimed.id).concurrency_key == "free"
    assert Job.objects.get(pk=held.id).status == JobStatus.RUNNING


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's lane claim")
@pytest.mark.parametrize("kind", ["custom", "generic"])
def test_lane_claim_plan_reads_the_window_row_by_row(clock, make_job, kind):
    """A nested loop over the window in claim order (no sort, no hash of the whole window),
    also in the generic plan a prepared statement settles on. A backlog of the other
    lane's rows longer than the window, with statistics that know it: reading all of
    them to sort would cost more than the window (with a few dozen due rows, a sort of
    them is the cheaper plan, and the planner rightly takes it)."""
    for priority in range(3):
        due_rows(clock, 4 * LANE_WINDOW, "tests.ok", priority)
    for n in range(20):
        make_job(name="tests.lane", priority=n % 3)
    analyze()  # its own statistics, not those the tests before it left
    sql, params = get_driver().claim_statement(lane(5))
    plan = postgresql_plan(sql, params, kind)
    assert "django_jobs_claim_idx" in plan, plan
    assert "Nested Loop" in plan and "Hash" not in plan and not sorts(plan), plan
    assert not scans(plan, "django_jobs_job"), plan


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's lane claim")
@pytest.mark.parametrize("kind", ["custom", "generic"])
def test_lane_claim_locks_its_window_rows_by_primary_key_whatever_the_statistics(clock, kind):
    """Statistics taken while hardly a job was due (a steady queue's, between bursts), then
    a backlog: each window row is locked through the primary key, one probe each. Where
    the planner could match the claim index's condition on the locked rows too, it read
    them through that index from its head for every window row instead: quadratic in the
    rows a claim passes (a claim of 18 jobs read 9,000 buffers in the soak at 3,490 jobs/s,
    and slowed most when the backlog grew)."""
    Job.objects.bulk_create(
        Job(name="tests.ok", status=JobStatus.SUCCEEDED, run_at=START, created_at=START)
        for _ in range(3000)
    )
    analyze()  # hardly a due job in the statistics, as autovacuum's ANALYZE would see
    due_rows(clock, 300, "tests.lane", 1)
    sql, params = get_driver().claim_statement(lane(20))
    plan = postgresql_plan(sql, params, kind)
    assert "Index Scan using django_jobs_job_pkey on django_jobs_job j " in plan, plan
    assert "django_jobs_claim_idx on django_jobs_job j " not in plan, plan
