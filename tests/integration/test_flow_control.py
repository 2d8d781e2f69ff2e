"""Flow control, on the database under test: paused queues, limits enforced in the claim's
transaction (global, per key, per window), and snoozes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import override_settings

from django_jobs import pause_queue, resume_queue, schedule_job
from django_jobs.db import ClaimRequest, get_driver
from django_jobs.db.records import QueueLimits, Rate, Settlement
from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus, Queue
from django_jobs.registry import queue_limits
from tests.conftest import START
from tests.support.threads import race
from tests.support.triggers import ordered_status_writes, refusing

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 60
KEYED = QueueLimits(keyed=True)
LONG = timedelta(seconds=600)


def request(
    limit: int = 10,
    queue: str = "default",
    limits: QueueLimits | None = None,
    owner: str = "w1",
    now=START,
    ahead: int = 0,
) -> ClaimRequest:
    return ClaimRequest(queue, owner, now, LEASE, limit, limits, ahead=ahead)


def claim(**kwargs) -> list[int]:
    return [job.id for job in get_driver().claim(request(**kwargs))]


def success(job_id: int, owner: str = "w1", at=START) -> Settlement:
    attempt = Job.objects.get(pk=job_id).attempt
    return Settlement(job_id, owner, attempt, AttemptOutcome.SUCCEEDED, JobStatus.SUCCEEDED, at)


def settle(*job_ids: int) -> None:
    assert get_driver().settle([success(job_id) for job_id in job_ids]).lost == []


@contextmanager
def another_session(statements: list[tuple[str, list[Any]]]) -> Iterator[Any]:
    """``statements`` run in a transaction of another session, held open (with its locks)
    until the block ends or it commits (the session is yielded); then closed."""
    other = connections.create_connection("default")
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
        yield other
    finally:
        other.close()


# -- pause and resume -------------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_until_resumed_and_other_queues_are(make_job) -> None:
    paused = make_job()
    other = make_job(queue="emails")
    assert pause_queue("default", now=START) is True
    assert pause_queue("default") is False  # paused already
    assert claim() == []
    assert claim(queue="emails") == [other.pk]
    assert Queue.objects.get(name="default").paused_at == START  # a row: it holds across restarts
    assert resume_queue("default") is True
    assert resume_queue("default") is False
    assert claim() == [paused.pk]


@pytest.mark.parametrize("limits", [None, QueueLimits(global_limit=5)], ids=["plain", "limited"])
def test_a_claim_that_carries_outcomes_takes_nothing_of_a_paused_queue(make_job, limits) -> None:
    first, second = make_job(), make_job()
    [taken] = claim(limit=1, limits=limits)
    pause_queue("default")
    claimed, settled = get_driver().claim_and_settle(request(limits=limits), [success(taken)])
    assert claimed == [] and settled.lost == []
    assert Job.objects.get(pk=taken).status == JobStatus.SUCCEEDED  # the outcome is written
    assert Job.objects.get(pk=(second.pk if taken == first.pk else first.pk)).status == "pending"


def test_pause_and_resume_refuse_a_name_no_queue_can_have() -> None:
    with pytest.raises(ValueError, match="queue"):
        pause_queue("")
    with pytest.raises(ValueError, match="queue"):
        resume_queue("x" * 101)


# -- a global limit ---------------------------------------------------------------------


def test_a_global_limit_caps_the_jobs_running_at_once_and_a_finished_one_frees_its_slot(
    make_job,
) -> None:
    limits = QueueLimits(global_limit=2)
    jobs = [make_job().pk for _ in range(5)]
    first = claim(limits=limits)
    assert first == jobs[:2]
    assert claim(limits=limits, owner="w2") == []
    settle(first[0])
    assert claim(limits=limits, owner="w2") == [jobs[2]]


def test_a_limited_claim_takes_jobs_ahead_only_while_as_many_slots_again_stay_free(
    make_job,
) -> None:
    limits = QueueLimits(global_limit=9)
    jobs = [make_job().pk for _ in range(12)]
    # 9 free: 4 asked, 2 of them ahead of free threads, 5 left: at least 2 to spare.
    assert claim(limits=limits, limit=4, ahead=2) == jobs[:4]
    # 5 free: taking 4 would leave 1, not 2 to spare: only the 2 for free threads.
    assert claim(limits=limits, limit=4, ahead=2, owner="w2") == jobs[4:6]
    assert claim(limits=limits, limit=4, ahead=2, owner="w3") == jobs[6:8]
    assert claim(limits=limits, limit=4, ahead=2, owner="w4") == jobs[8:9]
    assert claim(limits=limits, limit=4, ahead=2, owner="w5") == []


def test_a_rate_limited_claim_takes_jobs_ahead_only_with_room_in_the_window(make_job) -> None:
    limits = QueueLimits(rate=Rate(6, 60))
    jobs = [make_job().pk for _ in range(8)]
    assert claim(limits=limits, limit=2, ahead=1) == jobs[:2]  # 6 free in the window
    assert claim(limits=limits, limit=2, ahead=1) == jobs[2:4]  # 4 free: 2 to spare
    assert claim(limits=limits, limit=2, ahead=1) == [jobs[4]]  # 2 free: none to spare
    assert claim(limits=limits, limit=2, ahead=1) == [jobs[5]]
    assert claim(limits=limits, limit=2, ahead=0) == []


def test_a_job_of_a_key_is_claimed_ahead_only_while_a_slot_of_its_key_stays_free() -> None:
    pairs = [keyed_job("p", name="tests.keyed_pairs") for _ in range(3)]
    # Two slots for key "p": the first job is for a free thread, the second would be held
    # ahead and leave the key no free slot.
    assert claim(queue="keyed", limits=KEYED, limit=2, ahead=1) == pairs[:1]
    assert claim(queue="keyed", limits=KEYED, limit=1, ahead=0) == pairs[1:2]


def test_a_running_job_whose_lease_lapsed_holds_no_slot(make_job) -> None:
    limits = QueueLimits(global_limit=1)
    a, b = make_job().pk, make_job().pk
    assert claim(limits=limits) == [a]
    assert claim(limits=limits, now=START + timedelta(seconds=LEASE - 1)) == []
    # Not taken back yet, still "running": its lease has lapsed all the same.
    assert claim(limits=limits, now=START + timedelta(seconds=LEASE + 1), owner="w2") == [b]


def test_a_limited_claim_writes_its_outcomes_first_so_their_slots_count(make_job) -> None:
    limits = QueueLimits(global_limit=1)
    a, b = make_job().pk, make_job().pk
    assert claim(limits=limits) == [a]
    claimed, settled = get_driver().claim_and_settle(request(limits=limits), [success(a)])
    assert [job.id for job in claimed] == [b] and settled.lost == []


def test_a_limited_claim_says_which_outcomes_it_carried_were_fenced_out(make_job) -> None:
    """The outcomes a limited claim carries are written in its transaction (on PostgreSQL in
    the statement that takes the lock): the one whose attempt is stale is said lost and
    frees no slot; the queue's row, gone meanwhile, is made again and the claim goes on."""
    limits = QueueLimits(global_limit=2)
    a, b, c = make_job().pk, make_job().pk, make_job().pk
    assert claim(limits=limits, limit=2) == [a, b]
    stale = replace(success(b), attempt=success(b).attempt + 1)
    Queue.objects.filter(name="default").delete()
    claimed, settled = get_driver().claim_and_settle(
        request(limits=limits, limit=2), [success(a), stale]
    )
    assert settled.lost == [stale]
    assert [job.id for job in claimed] == [c]  # a's slot freed, b's still held
    assert Job.objects.get(pk=a).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=b).status == JobStatus.RUNNING
    assert Attempt.objects.get(job_id=a).outcome == AttemptOutcome.SUCCEEDED


def test_racing_claims_never_run_more_than_the_global_limit(make_job) -> None:
    limits = QueueLimits(global_limit=3)
    for _ in range(20):
        make_job()
    taken: list[int] = []
    errors = race(
        [f"w{n}" for n in range(6)],
        lambda owner: taken.extend(claim(limit=2, limits=limits, owner=owner)),
    )
    assert errors == []
    assert len(taken) == 3
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 3


# -- concurrency keys -------------------------------------------------------------------


def keyed_job(key: str | None = None, name: str = "tests.keyed", **kwargs) -> int:
    return schedule_job(name, {}, concurrency_key=key, run_at=START, **kwargs).pk


@pytest.mark.parametrize(
    "limits",
    [QueueLimits(global_limit=5), QueueLimits(rate=Rate(6, 60)), KEYED],
    ids=["global_limit", "rate_limit", "keyed"],
)
def test_a_claim_after_one_that_took_nothing_asks_first_whether_anything_is_due(
    make_job, limits: QueueLimits
) -> None:
    """A worker polling a limited queue with nothing due takes no lock each poll (the
    queue's row; on SQLite the database's write lock): one read, and nothing claimed. Once
    a job is due, the claim takes it as before."""
    from django.test.utils import CaptureQueriesContext

    assert claim(limits=limits) == []  # the claim itself, which finds nothing
    with CaptureQueriesContext(connections["default"]) as queries:
        assert claim(limits=limits) == []
    assert [q["sql"].split(" FROM ")[0] for q in queries] == ["SELECT 1"]
    job = make_job(concurrency_key="a").pk
    assert claim(limits=limits) == [job]


@pytest.mark.parametrize("limits", [QueueLimits(global_limit=1), KEYED], ids=["global", "keyed"])
def test_a_claim_under_the_lock_counts_the_jobs_the_claim_it_waited_for_started(limits) -> None:
    """Another session holds the queue's lock (SQLite: the write lock) and starts a job: the
    claim waiting for that lock counts it once it has the lock, where MariaDB and SQLite count
    in the lock's own statement. One slot (the global limit's, or the key's) is left none."""
    started, waiting = keyed_job("a"), keyed_job("a")
    get_driver().flow.make_queue_row("keyed")
    lock = [("SELECT 1 FROM django_jobs_queue WHERE name = %s FOR UPDATE", ["keyed"])]
    start = (
        "UPDATE django_jobs_job SET status = %s, lease_owner = %s, lease_expires_at = %s,"
        " attempt = 1, attempts_used = 1 WHERE id = %s"
    )
    took: list[list[int]] = []
    with another_session(
        [
            *(lock if connections["default"].vendor != "sqlite" else []),
            (start, [JobStatus.RUNNING.value, "w0", START + LONG, started]),
        ]
    ) as other:
        errors: list[BaseException] = []
        thread = threading.Thread(
            target=lambda: errors.extend(
                race(["w1"], lambda _: took.append(claim(queue="keyed", limits=limits)))
            )
        )
        thread.start()
        thread.join(0.5)  # the claim waits for the lock meanwhile
        assert thread.is_alive()
        other.commit()
        thread.join(30)
    assert not errors
    assert took == [[]]
    assert Job.objects.get(pk=waiting).status == JobStatus.PENDING


def test_a_keyed_claim_whose_queue_row_is_gone_makes_it_and_says_what_it_took() -> None:
    """A claim that finds no row to lock takes nothing: the row is made, and the claim
    made again takes the job and says so (a job taken unlocked, and not said, would run
    unreported, and the claim made again would find its key full). The outcomes it
    carried are written once."""
    done, first, second = keyed_job("b"), keyed_job("a"), keyed_job("a")
    assert claim(queue="keyed", limits=KEYED, limit=1) == [done]
    Queue.objects.filter(name="keyed").delete()
    claimed, settled = get_driver().claim_and_settle(
        request(queue="keyed", limits=KEYED), [success(done)]
    )
    assert [job.id for job in claimed] == [first] and settled.lost == []
    assert list(Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", flat=True)) == [
        first
    ]
    assert Attempt.objects.get(job_id=done).outcome == AttemptOutcome.SUCCEEDED
    assert Job.objects.get(pk=second).status == JobStatus.PENDING


def test_a_lane_that_finds_none_of_its_jobs_does_not_wait_for_a_slot_while_no_key_is_full():
    """A claim short of its threads marks the queue as waiting for a slot when a key's limit
    passed rows over, so that a slot freed wakes the queue's workers. A lane with nothing
    due of its names passed nothing over: marked, each outcome written would wake both
    lanes, and the empty one would claim nothing again, under the queue's lock."""
    keyed_job("p", name="tests.keyed_pairs")  # a key of two slots, one of them running
    keyed_job("p", name="tests.keyed_pairs")
    assert len(claim(queue="keyed", limits=KEYED, limit=1)) == 1
    lane = replace(
        request(queue="keyed", limits=KEYED, limit=4, owner="w2"),
        names=("tests.ok",),
        among=("tests.ok", "tests.keyed_pairs"),
    )
    assert get_driver().claim(lane) == []
    assert not slot_wanted("keyed")


def test_a_claim_whose_due_jobs_are_all_of_a_full_key_waits_for_a_slot() -> None:
    """The rows of a full key are passed over in the read itself: the claim reads none, and
    still marks the queue, so that the slot's end wakes a worker for them."""
    a1, a2 = keyed_job("a"), keyed_job("a")
    assert claim(queue="keyed", limits=KEYED) == [a1]
    assert not slot_wanted("keyed")
    assert claim(queue="keyed", limits=KEYED, owner="w2") == []
    assert slot_wanted("keyed")
    settle(a1)
    assert claim(queue="keyed", limits=KEYED, owner="w2") == [a2]


def test_one_job_per_key_runs_at_once_and_other_keys_run_freely() -> None:
    a1, a2, b1 = keyed_job("a"), keyed_job("a"), keyed_job("b")
    assert claim(queue="keyed", limits=KEYED) == [a1, b1]
    assert claim(queue="keyed", limits=KEYED, owner="w2") == []
    settle(a1)
    assert claim(queue="keyed", limits=KEYED, owner="w2") == [a2]


def test_a_key_limit_above_one_lets_that_many_run() -> None:
    jobs = [keyed_job("p", name="tests.keyed_pairs") for _ in range(3)]
    assert claim(queue="keyed", limits=KEYED) == jobs[:2]
    assert claim(queue="keyed", limits=KEYED) == []


def test_without_a_key_the_limit_holds_for_the_job_name() -> None:
    first, second = keyed_job(), keyed_job()
    assert Job.objects.get(pk=first).concurrency_key == "tests.keyed"
    assert claim(queue="keyed", limits=KEYED) == [first]
    assert claim(queue="keyed", limits=KEYED) == []
    settle(first)
    assert claim(queue="keyed", limits=KEYED) == [second]


def test_rows_of_a_full_key_at_the_head_do_not_hide_other_keys() -> None:
    running = keyed_job("busy")
    assert claim(queue="keyed", limits=KEYED) == [running]
    behind = [keyed_job("busy") for _ in range(60)]
    other = keyed_job("free")
    assert claim(queue="keyed", limits=KEYED, limit=1) == [other]
    assert Job.objects.filter(pk__in=behind, status="pending").count() == 60


def test_racing_claims_never_run_two_jobs_of_one_key() -> None:
    for key in "abc":
        for _ in range(4):
            keyed_job(key)
    taken: list[int] = []
    race(
        [f"w{n}" for n in range(6)],
        lambda owner: taken.extend(claim(queue="keyed", limit=3, limits=KEYED, owner=owner)),
    )
    keys = list(Job.objects.filter(pk__in=taken).values_list("concurrency_key", flat=True))
    assert sorted(keys) == ["a", "b", "c"]


def test_schedule_job_refuses_a_key_the_job_cannot_hold() -> None:
    with pytest.raises(ValueError, match="no concurrency limit"):
        schedule_job("tests.ok", {}, concurrency_key="account-1")
    with pytest.raises(ValueError, match="queue 'default' has none"):
        schedule_job("tests.keyed", {}, concurrency_key="account-1", queue="default")
    with pytest.raises(ValueError, match="concurrency_key"):
        schedule_job("tests.keyed", {}, concurrency_key="k" * 201)


def test_a_keyed_queue_is_claimed_under_its_keys_and_default_is_not() -> None:
    assert queue_limits("keyed") == QueueLimits(keyed=True)
    assert queue_limits("default") is None


# -- a rate limit -----------------------------------------------------------------------


def test_a_rate_limit_caps_the_starts_in_each_window() -> None:
    limits = QueueLimits(rate=Rate(3, 60))
    window = Rate(3, 60).window_start(START)
    for _ in range(5):
        schedule_job("tests.ok", {}, run_at=START)
    assert len(claim(limits=limits, now=window + timedelta(seconds=1))) == 3
    assert claim(limits=limits, now=window + timedelta(seconds=59)) == []
    assert len(claim(limits=limits, now=window + timedelta(seconds=60))) == 2


def test_a_claim_whose_time_is_behind_a_later_windows_claim_takes_nothing() -> None:
    """Claims read their time, then wait for the queue's lock: one labelled with the window
    before a claim that committed first must neither reset the window nor count in it."""
    limits = QueueLimits(rate=Rate(3, 60))
    window = Rate(3, 60).window_start(START)
    later = window + timedelta(seconds=60)
    for _ in range(8):
        schedule_job("tests.ok", {}, run_at=START)
    assert len(claim(limits=limits, now=window + timedelta(seconds=1), limit=1)) == 1
    assert len(claim(limits=limits, now=later, limit=3)) == 3  # the next window, full
    assert claim(limits=limits, now=later - timedelta(seconds=1)) == []  # stale: nothing
    assert claim(limits=limits, now=later + timedelta(seconds=1)) == []  # still full
    assert Attempt.objects.filter(started_at__lt=later).count() == 1
    assert Attempt.objects.filter(started_at__gte=later).count() == 3


def window_count() -> int:
    return Queue.objects.get(name="default").window_count


def test_a_claim_that_takes_all_it_asks_under_a_rate_far_from_full_counts_starts_ahead() -> None:
    """The next claims of the process take them without the queue's lock; the window's
    count never falls below the starts, and a new window takes the lock again."""
    from django_jobs.db.limits import RESERVED_CLAIMS

    limits = QueueLimits(rate=Rate(1000, 60))
    window = Rate(1000, 60).window_start(START)
    for _ in range(30):
        schedule_job("tests.ok", {}, run_at=START)
    at = window + timedelta(seconds=1)
    assert len(claim(limits=limits, limit=2, now=at)) == 2
    counted = window_count()
    assert counted == 2 + 2 * RESERVED_CLAIMS
    for _ in range(RESERVED_CLAIMS):  # the starts counted ahead: the row is not written
        assert len(claim(limits=limits, limit=2, now=at)) == 2
        assert window_count() == counted
    assert len(claim(limits=limits, limit=2, now=at)) == 2  # used up: under the lock again
    assert window_count() == 2 * counted
    assert Attempt.objects.count() <= window_count()
    later = window + timedelta(seconds=60)  # the next window: what was counted ahead is gone
    assert len(claim(limits=limits, limit=2, now=later)) == 2
    assert window_count() == counted


def two_starts_left() -> tuple[QueueLimits, datetime, int]:
    """40 jobs due under a rate far from full, claimed two at a time until two of the starts
    counted ahead for this process are left: the limits, the claims' time, and the window's
    count after the first claim (the one under the lock)."""
    from django_jobs.db.limits import RESERVED_CLAIMS

    limits = QueueLimits(rate=Rate(1000, 60))
    at = Rate(1000, 60).window_start(START) + timedelta(seconds=1)
    for _ in range(40):
        schedule_job("tests.ok", {}, run_at=START)
    assert len(claim(limits=limits, limit=2, now=at)) == 2
    counted = window_count()
    for _ in range(RESERVED_CLAIMS - 1):
        assert len(claim(limits=limits, limit=2, now=at)) == 2
    assert get_driver().flow.reserved["default"].starts == 2
    return limits, at, counted


def test_a_claim_whose_starts_counted_ahead_run_out_takes_the_rest_under_the_lock() -> None:
    """Starts counted ahead for claims of 2 leave two for a claim of 3: it takes those,
    and one more under the lock. Returned short, it would read as a queue run dry, and the
    worker would sleep until the next window with jobs due (a drain at a tenth)."""
    limits, at, counted = two_starts_left()
    assert len(claim(limits=limits, limit=3, now=at)) == 3
    assert window_count() > counted  # the third under the lock, counted there
    assert Attempt.objects.count() <= window_count()


def test_a_claim_whose_rest_under_the_lock_fails_returns_what_it_took_before(caplog) -> None:
    """A claim that took starts counted ahead (committed) and goes on under the lock: if
    that second transaction fails, the jobs of the first are returned all the same. Raised
    past, they would stay running under the worker's lease with no thread to run them."""
    limits, at, _ = two_starts_left()
    held = set(Job.objects.filter(status=JobStatus.RUNNING).values_list("id", flat=True))
    with refusing("refuse_queue_row", "UPDATE", Queue._meta.db_table):
        claimed = claim(limits=limits, limit=3, now=at)
    assert len(claimed) == 2
    running = set(Job.objects.filter(status=JobStatus.RUNNING).values_list("id", flat=True))
    assert running - held == set(claimed)  # none claimed and not returned
    assert "under its lock failed (IntegrityError" in caplog.text
    assert "refuse_queue_row" in caplog.text


@pytest.mark.parametrize(
    ("rate", "asked", "due", "ahead"),
    [(Rate(5, 60), 2, 10, False), (Rate(1000, 60), 4, 3, False), (Rate(1000, 60), 2, 9, True)],
    ids=["near-the-rate", "queue-ran-dry", "with-a-global-limit"],
)
def test_a_claim_counts_no_starts_ahead_near_its_rate_short_of_jobs_or_under_other_limits(
    rate: Rate, asked: int, due: int, ahead: bool
) -> None:
    limits = QueueLimits(global_limit=100 if ahead else None, rate=rate)
    for _ in range(due):
        schedule_job("tests.ok", {}, run_at=START)
    at = rate.window_start(START) + timedelta(seconds=1)
    taken = len(claim(limits=limits, limit=asked, now=at))
    assert window_count() == taken
    assert get_driver().flow.reserved == {}


def test_starts_counted_ahead_and_not_taken_are_given_back(make_job) -> None:
    """A claim of the process that takes fewer than it took of them leaves the rest to
    the next."""
    limits = QueueLimits(rate=Rate(1000, 60))
    at = Rate(1000, 60).window_start(START) + timedelta(seconds=1)
    for _ in range(2):
        schedule_job("tests.ok", {}, run_at=START)
    assert len(claim(limits=limits, limit=2, now=at)) == 2
    left = get_driver().flow.reserved["default"].starts
    assert claim(limits=limits, limit=2, now=at) == []  # nothing due
    assert get_driver().flow.reserved["default"].starts == left


def test_settings_give_a_queue_its_limits() -> None:
    queues = {"default": {"workers": 2, "global_limit": 2, "rate_limit": "100/m"}}
    with override_settings(DJANGO_JOBS={"QUEUES": queues}):
        assert queue_limits("default") == QueueLimits(global_limit=2, rate=Rate(100, 60))


def test_a_dispatcher_held_by_its_rate_limit_claims_again_as_the_next_window_opens(
    clock,
) -> None:
    """A claim short of its room sleeps until woken or the poll; a full rate window frees
    no slot to be woken for, and the next opens at a time every worker knows: it sleeps
    until then (and a margin), not a whole poll."""
    from django_jobs.worker import Worker
    from django_jobs.worker.dispatcher import WINDOW_MARGIN_SECONDS
    from django_jobs.worker.server import Server

    queues = {
        "default": {"workers": 2, "rate_limit": "500/s"},
        "minutely": {"workers": 1, "rate_limit": "10/m"},
        "plain": {"workers": 1},
    }
    with override_settings(DJANGO_JOBS={"QUEUES": queues, "POLL_SECONDS": 1.0}):
        server = Server(Worker(list(queues), clock=clock).parts())
        waits = {}
        for dispatcher in server.dispatchers:
            waits.setdefault(dispatcher.state.name, set()).add(dispatcher.dry_wait(1.0))
        clock.set(START + timedelta(seconds=20.25))
        late = {d.state.name: d.dry_wait(1.0) for d in server.dispatchers}
    assert waits["default"] == {1.0}  # at a window's start: the poll comes first
    assert late["default"] == pytest.approx(0.75 + WINDOW_MARGIN_SECONDS)
    assert late["minutely"] == 1.0  # the poll comes first
    assert late["plain"] == 1.0


# -- snooze -----------------------------------------------------------------------------


@pytest.mark.parametrize("by_context", [False, True], ids=["raise", "ctx.snooze"])
def test_a_snoozed_job_is_due_after_its_delay_without_using_an_attempt(
    worker: Callable, clock, by_context: bool
) -> None:
    job = schedule_job(
        "tests.snoozes", {"seconds": 30, "by_context": by_context}, run_at=clock.now()
    )
    w = worker()
    w.run_once()
    job.refresh_from_db()
    assert (job.status, job.attempts_used, job.attempt) == (JobStatus.PENDING, 0, 1)
    assert job.run_at == clock.now() + timedelta(seconds=30)
    attempt = Attempt.objects.get(job=job)
    assert (attempt.outcome, attempt.error) == (AttemptOutcome.SNOOZED, "Snoozed for 30 s")


def test_a_job_that_snoozes_past_the_cap_is_dead_lettered_saying_so(
    worker: Callable, clock
) -> None:
    job = schedule_job("tests.snoozes", {"seconds": 0}, run_at=clock.now())
    w = worker()
    with override_settings(DJANGO_JOBS={"MAX_SNOOZES": 2}):
        for _ in range(3):
            w.run_once()
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD_LETTERED
    assert "Snoozed 3 times, past DJANGO_JOBS['MAX_SNOOZES'] (2)" in job.last_error
    outcomes = list(job.attempts.order_by("number").values_list("outcome", flat=True))
    assert outcomes == ["snoozed"] * 3


@pytest.mark.parametrize("limits", [QueueLimits(global_limit=5), KEYED], ids=["global", "keyed"])
def test_a_row_the_database_refuses_is_skipped_and_the_others_claimed(limits) -> None:
    from tests.support.triggers import refusing

    queue = "keyed" if limits.keyed else "default"
    name = "tests.keyed" if limits.keyed else "tests.ok"
    bad, good = (
        schedule_job(name, {}, run_at=START, **({"concurrency_key": k} if limits.keyed else {}))
        for k in ("a", "b")
    )
    with refusing("test_refuse_limited", "INSERT", "django_jobs_attempt", f"NEW.job_id = {bad.pk}"):
        assert claim(queue=queue, limits=limits) == [good.pk]
    assert Job.objects.get(pk=bad.pk).status == JobStatus.PENDING  # untouched, tried again later
    assert claim(queue=queue, limits=limits) == [bad.pk]


# -- wake-ups: a slot freed in a limited queue --------------------------------------------


@pytest.fixture
def listener():
    from django_jobs.db.notify import Listener

    listening = Listener("default", first_backoff=0.05)
    try:
        assert listening.wait(0) == set()  # connected and probed: LISTEN is in place
        yield listening
    finally:
        listening.close()


def drained(listener) -> None:
    """What the listener has heard so far (the enqueues' wake-ups), passed over."""
    while listener.wait(0.2):
        pass


def heard(listener, queue: str, seconds: float = 3) -> bool:
    import time

    names: set[str] = set()
    deadline = time.monotonic() + seconds
    while queue not in names and time.monotonic() < deadline:
        names.update(listener.wait(0.05))
    return queue in names


def slot_wanted(queue: str) -> bool:
    return Queue.objects.get(name=queue).slot_wanted


def test_a_claim_the_limit_keeps_short_says_a_slot_is_wanted_until_one_is_freed() -> None:
    limits = QueueLimits(global_limit=1)
    first, second = keyed_job("a"), keyed_job("b")
    assert claim(queue="keyed", limits=limits, limit=1) == [first]
    assert not slot_wanted("keyed")  # it took all its free threads could start
    assert claim(queue="keyed", limits=limits, limit=1, owner="w2") == []
    assert slot_wanted("keyed")
    freeing = request(queue="keyed", limits=limits, limit=1)
    [taken], _ = get_driver().claim_and_settle(freeing, [success(first)])
    assert taken.id == second
    assert not slot_wanted("keyed")  # the freed slot woke the workers, and is taken


@pytest.mark.listen_notify
def test_a_limited_claim_that_carries_outcomes_wakes_its_queue_when_a_slot_is_wanted(
    listener,
) -> None:
    limits = QueueLimits(global_limit=1)
    first, _second = keyed_job("a"), keyed_job("b")
    assert claim(queue="keyed", limits=limits) == [first]
    assert claim(queue="keyed", limits=limits, owner="w2") == []  # w2 waits for the slot
    drained(listener)
    get_driver().claim_and_settle(request(queue="keyed", limits=limits, limit=0), [success(first)])
    assert heard(listener, "keyed")


@pytest.mark.listen_notify
def test_a_limited_claim_far_from_its_limit_wakes_nobody(listener) -> None:
    """No worker waits for a slot: a claim that frees some sends no wake-up (each would
    wake every lane of every worker of the queue for nothing)."""
    limits = QueueLimits(global_limit=100)
    first, _second = keyed_job("a"), keyed_job("b")
    assert claim(queue="keyed", limits=limits, limit=1) == [first]
    drained(listener)
    get_driver().claim_and_settle(request(queue="keyed", limits=limits), [success(first)])
    assert not heard(listener, "keyed", seconds=0.5)


def test_an_outcome_written_apart_in_a_limited_queue_rings_this_process_dispatcher(
    worker,
) -> None:
    """The settler may take a limited job's outcome before its dispatcher's claim can carry
    it: that claim still counts the slot held and sleeps. Without LISTEN no database
    wake-up follows the write, so the writer wakes this process's dispatcher itself."""
    from django_jobs.outcomes import HandlerResult
    from django_jobs.worker.settler import Outcome

    keyed_job("a"), keyed_job("a")
    w = worker(queues={"keyed": 1})
    [claimed] = w.claimer.claim("keyed", START, 1)
    assert w.claimer.claim("keyed", START, 1) == []  # its key is full: a slot is wanted
    w.doorbells["keyed"].clear()
    w.writer.write([Outcome(claimed, HandlerResult(AttemptOutcome.SUCCEEDED))])
    assert w.doorbells["keyed"].is_set()
    assert not slot_wanted("keyed")


def test_an_outcome_written_apart_where_no_slot_is_wanted_rings_nothing(worker) -> None:
    from django_jobs.outcomes import HandlerResult
    from django_jobs.worker.settler import Outcome

    keyed_job("a")
    w = worker(queues={"keyed": 1})
    [claimed] = w.claimer.claim("keyed", START, 1)
    w.doorbells["keyed"].clear()
    w.writer.write([Outcome(claimed, HandlerResult(AttemptOutcome.SUCCEEDED))])
    assert not w.doorbells["keyed"].is_set()


@pytest.mark.listen_notify
def test_an_outcome_written_apart_in_a_limited_queue_wakes_it(listener, worker) -> None:
    from django_jobs.outcomes import HandlerResult
    from django_jobs.worker.settler import Outcome

    job_id = keyed_job("a")
    keyed_job("a")
    w = worker(queues={"keyed": 1})
    [claimed] = w.claimer.claim("keyed", START, 1)
    assert job_id == claimed.id
    assert w.claimer.claim("keyed", START, 1) == []  # a slot is wanted
    drained(listener)
    w.writer.write([Outcome(claimed, HandlerResult(AttemptOutcome.SUCCEEDED))])
    assert heard(listener, "keyed")  # a success is not due again: only its slot wakes it


# -- names compare exactly, trailing spaces too ---------------------------------------------


def test_a_queue_name_with_a_trailing_space_is_another_queue() -> None:
    """MariaDB's PAD SPACE collations took ``'snz'`` and ``'snz '`` for one name."""
    spaced = schedule_job("tests.ok", {}, queue="snz ", run_at=START)
    plain = schedule_job("tests.ok", {}, queue="snz", run_at=START)
    assert claim(queue="snz") == [plain.pk]
    assert pause_queue("snz ") is True
    assert Queue.objects.get(name="snz ").paused_at is not None
    assert not Queue.objects.filter(name="snz", paused_at__isnull=False).exists()
    assert claim(queue="snz ") == []  # paused
    resume_queue("snz ")
    assert claim(queue="snz ") == [spaced.pk]


def test_keys_that_differ_by_a_trailing_space_are_two_keys() -> None:
    first, second = (
        schedule_job("tests.keyed", {}, run_at=START, concurrency_key=key) for key in ("k", "k ")
    )
    assert sorted(claim(queue="keyed", limits=KEYED)) == sorted([first.pk, second.pk])
    one = schedule_job("tests.ok", {}, unique_key="u")
    other = schedule_job("tests.ok", {}, unique_key="u ")
    assert one.pk != other.pk


@pytest.mark.skipif(connections["default"].vendor != "postgresql", reason="PostgreSQL's bound")
def test_a_limited_claims_transaction_is_bounded_by_the_statement_that_takes_the_lock() -> None:
    """Its client gone silent inside it, the server ends the transaction that holds the
    queue's lock after the call's deadline: the lock's own statement sets the bound."""
    from django.db import transaction

    driver = get_driver()
    was = driver.idle_bound_ms
    driver.bound_session(1.0)  # what a worker's deadline does to its connection
    keyed_job("a")
    driver.flow.make_queue_row("keyed")
    with transaction.atomic():
        assert driver.flow.claim_in_queue(request(queue="keyed", limits=KEYED)) is not None
        with connections["default"].cursor() as cursor:
            cursor.execute("SHOW idle_in_transaction_session_timeout")
            assert cursor.fetchone()[0] == "2s"
    with connections["default"].cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] != "2s"  # for that transaction only
    driver.idle_bound_ms = was


@pytest.mark.skipif(connections["default"].vendor != "postgresql", reason="PostgreSQL's claim")
def test_the_one_statement_claim_under_limits_takes_what_the_steps_take() -> None:
    """PostgreSQL claims a limited queue, once it holds the lock, in one statement: over
    keys of one and two slots, jobs without a key, priorities, running jobs, a global
    limit and a rate window, it takes the rows the steps take, and says a slot is wanted
    when they do."""
    keys = ["a", "b", "a", "p", "q", None, "p", "p", "a", "q", None, "b", "p", "c", None]
    for n, key in enumerate(keys):
        name = "tests.keyed_pairs" if key in ("p", "q") else "tests.keyed"
        if key is None:
            schedule_job("tests.ok", {}, queue="keyed", run_at=START, priority=n % 3)
        else:
            keyed_job(key, name=name, priority=n % 3)
        schedule_job("tests.ok", {}, run_at=START, priority=n % 3)
    claim(queue="keyed", limits=KEYED, limit=3)  # running: hold slots of some keys
    claim(limits=QueueLimits(global_limit=10), limit=2)
    compared = 0
    for queue, limits in (
        ("keyed", KEYED),
        ("keyed", QueueLimits(global_limit=6, keyed=True)),
        ("keyed", QueueLimits(rate=Rate(7, 60), keyed=True)),
        ("default", QueueLimits(global_limit=6)),
        ("default", QueueLimits(global_limit=9, rate=Rate(5, 60))),
    ):
        for limit in range(1, 7):
            for ahead in range(limit):
                asked = request(queue=queue, limits=limits, limit=limit, ahead=ahead, owner="w2")
                for before in QUEUE_ROWS:
                    for freed in (False, True):
                        one, steps = one_statement_and_steps(asked, before, freed)
                        assert one == steps, (queue, limits, limit, ahead, before, freed)
                        compared += bool(one[0])
    assert compared > 500  # most cases claim something: the comparison is not of nothing


# The queue's row before a claim (paused, a worker waits for a slot, jobs started in the
# claim's rate window, in a later one): the one statement reads it and writes it itself.
QUEUE_ROWS = [
    {},
    {"slot_wanted": True},
    {"slot_wanted": True, "window_count": 3, "in_window": True},
    {"window_count": 2, "in_window": True},
    {"window_count": 2, "in_window": False},
    {"ahead_window": True},
    {"paused": True, "slot_wanted": True},
]


def one_statement_and_steps(
    asked: ClaimRequest, before: dict[str, Any], freed: bool
) -> list[tuple[list[int], bool, int]]:
    """What the claim under the queue's lock takes (its ids), and the queue's row it leaves
    (whether a slot is wanted, the rate window's count), by the driver's flow control and
    by the steps it overrides, from the queue's row ``before`` (:data:`QUEUE_ROWS`), each
    rolled back."""
    from django.db import transaction

    from django_jobs.db.limits import FlowControl

    flow = get_driver().flow
    assert type(flow) is not FlowControl
    flow.make_queue_row(asked.queue)
    window = FlowControl.window(asked)
    taken = []
    steps = FlowControl(flow.statements, flow.steps)
    for claim_locked in (flow.claim_locked, steps.claim_locked):
        with transaction.atomic():
            set_queue_row(asked, window, before)
            row = flow.lock_queue(asked, window)
            assert row is not None
            got = claim_locked(asked, window, row, False, freed)
            assert got is not None
            left = Queue.objects.get(name=asked.queue)
            taken.append(([job.id for job in got], left.slot_wanted, left.window_count))
            transaction.set_rollback(True)
    return taken


def set_queue_row(asked: ClaimRequest, window: datetime | None, before: dict[str, Any]) -> None:
    start = window or asked.now
    if before.get("ahead_window"):
        start += timedelta(hours=1)
    elif not before.get("in_window", True):
        start -= timedelta(hours=1)
    Queue.objects.filter(name=asked.queue).update(
        paused_at=asked.now if before.get("paused") else None,
        slot_wanted=before.get("slot_wanted", False),
        window_count=before.get("window_count", 0),
        window_start=start if before else None,
    )


# -- PostgreSQL: claims under a global limit that skip the queue's lock -----------------

on_postgresql = pytest.mark.skipif(
    connections["default"].vendor != "postgresql", reason="PostgreSQL's claims without the lock"
)
FAR = QueueLimits(global_limit=100)


@contextmanager
def another_session_runs(sql: str, params: list[Any]) -> Iterator[None]:
    """``sql`` run in a transaction of another session, held open (with its locks)."""
    with another_session([(sql, params)]):
        yield


def queue_row_locked(mode: str, queue: str = "default") -> Any:
    """The queue's row locked by another session: ``FOR KEY SHARE`` as a claim that skips
    the lock holds it until it commits; ``FOR UPDATE`` as a claim under the lock does."""
    get_driver().flow.make_queue_row(queue)
    return another_session_runs(
        f"SELECT 1 FROM django_jobs_queue WHERE name = %s FOR {mode}", [queue]
    )


def claim_at_once(**kwargs: Any) -> list[int] | None:
    """The claim's jobs; None if it waited for a lock (half a second, then gave up)."""
    from django.db import OperationalError

    get_driver().flow.locked_until.clear()
    with connections["default"].cursor() as cursor:
        cursor.execute("SET lock_timeout = '500ms'")
    try:
        return claim(**kwargs)
    except OperationalError as error:
        assert "lock timeout" in str(error)
        return None
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")


def serving(owner: str, largest_claim: int | None, queues: tuple[str, ...] = ("default",)) -> None:
    from django_jobs.models import WorkerProcess
    from django_jobs.worker.processes import register_worker

    register_worker(owner, queues, START, "default", largest_claim=largest_claim or 0)
    if largest_claim is None:  # a row an older version wrote, which says nothing of it
        WorkerProcess.objects.filter(id=owner).update(largest_claim=None)


@on_postgresql
def test_under_a_global_limit_far_from_full_a_claim_skips_the_queues_lock(make_job) -> None:
    """A process whose row says how large its claims are, under a limit that leaves room
    for them, claims while another holds the queue's lock; one with no row waits for it."""
    for _ in range(4):
        make_job()
    serving("w1", 4)
    with queue_row_locked("KEY SHARE"):
        assert claim_at_once(limit=2, limits=FAR) is not None
        assert claim_at_once(limit=2, limits=FAR, owner="w2") is None
    assert Job.objects.filter(status=JobStatus.RUNNING, lease_owner="w1").count() == 2


@on_postgresql
@pytest.mark.parametrize(
    ("others", "running", "asked", "skips"),
    [
        ({"w2": 4}, 2, 4, True),  # 2 running + 4 + 4 = 10: fits
        ({"w2": 4}, 3, 4, False),  # 11
        ({"w2": 4, "w3": 0}, 2, 4, True),  # a process that always takes the lock: no room
        ({"w3": None}, 0, 1, False),  # a row of an older version says nothing: the lock
        ({}, 0, 5, False),  # a claim larger than its row says
        ({"w2": 40}, 0, 1, True),  # w2 serves another queue
    ],
    ids=["fits", "one-over", "zero", "older-row", "larger-claim", "other-queue"],
)
def test_a_claim_skips_the_lock_only_while_the_running_jobs_and_every_serving_largest_claim_fit(
    make_job, others: dict[str, int | None], running: int, asked: int, skips: bool
) -> None:
    for _ in range(running):
        make_job(status=JobStatus.RUNNING, lease_owner="x", lease_expires_at=START + LONG)
    make_job()
    serving("w1", 4)
    for owner, largest in others.items():
        serving(owner, largest, ("other",) if largest == 40 else ("default",))
    with queue_row_locked("KEY SHARE"):
        claimed = claim_at_once(limit=asked, limits=QueueLimits(global_limit=10))
    assert (claimed is not None) is skips
    if not skips:  # the lock free, it claims under it
        assert len(claim(limit=asked, limits=QueueLimits(global_limit=10))) == 1


@on_postgresql
def test_a_claim_under_the_lock_waits_for_claims_that_skip_it_and_they_for_it(make_job) -> None:
    """A claim under the lock counts the jobs running as it holds the lock: it waits for
    the claims that skip the lock and are under way to commit; they pass it by."""
    for _ in range(4):
        make_job()
    serving("w1", 4)
    with queue_row_locked("KEY SHARE"):  # a claim that skips the lock, under way
        assert claim_at_once(limit=1, limits=FAR, owner="w2") is None  # under the lock: waits
        assert claim_at_once(limit=1, limits=FAR) is not None  # another that skips it: not
    with queue_row_locked("UPDATE"):  # a claim under the lock, under way
        assert claim_at_once(limit=1, limits=FAR) is None  # not skipped: it waits its turn


def version(queue: str = "default") -> str:
    """The queue's row's version (``xmin``): a write of it makes a new one."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM django_jobs_queue WHERE name = %s", [queue])
        return cursor.fetchone()[0]


@on_postgresql
@pytest.mark.parametrize("queue", ["default", "keyed"])
def test_a_claim_under_the_lock_that_takes_jobs_writes_the_queues_row(make_job, queue) -> None:
    """A claim that skips the lock claims only if the queue's row it locks is the version
    its snapshot saw: a claim under the lock that committed since, with jobs the snapshot
    cannot count, wrote a newer one. Under a global limit and under keys, whose claims may
    skip the lock; in the claim's own statement, not a round trip of its own."""
    from django.test.utils import CaptureQueriesContext

    keyed = queue == "keyed"
    make_job(queue=queue, name="tests.keyed" if keyed else "tests.noop", concurrency_key="a")
    get_driver().flow.make_queue_row(queue)
    before = version(queue)
    with CaptureQueriesContext(connections["default"]) as queries:
        # No row of its own: the lock.
        assert len(claim(limit=1, queue=queue, limits=KEYED if keyed else FAR, owner="w2")) == 1
    assert version(queue) != before
    assert not [q for q in queries if q["sql"].startswith('UPDATE "django_jobs_queue"')]


@on_postgresql
def test_a_keyed_queue_that_one_process_serves_is_claimed_without_the_lock() -> None:
    """Its claims take turns in the process, each seeing the one before: they need not
    wait for each other's commits behind the queue's row. Another process serving the
    queue sends them to the lock: two claims counting a key's running jobs at once could
    each take its last slot."""
    for key in "abcd":
        keyed_job(key)
    serving("w1", 4, ("keyed",))
    with queue_row_locked("KEY SHARE", "keyed"):  # a claim that skips the lock, under way
        assert len(claim_at_once(limit=2, queue="keyed", limits=KEYED) or []) == 2
        serving("w2", 4, ("keyed",))
        assert claim_at_once(limit=2, queue="keyed", limits=KEYED) is None  # waits its turn


@on_postgresql
def test_a_keyed_claim_without_the_lock_counts_the_slots_its_own_outcomes_free() -> None:
    """A statement does not see what its own ``WITH`` queries wrote: the running jobs it
    counts leave out those whose outcomes it carries, or the key they free reads as full."""
    first, second = keyed_job("a"), keyed_job("a")
    serving("w1", 4, ("keyed",))
    assert claim(queue="keyed", limits=KEYED, limit=1) == [first]
    freeing = request(queue="keyed", limits=KEYED, limit=1)
    [taken], _ = get_driver().claim_and_settle(freeing, [success(first)])
    assert taken.id == second
    assert "keyed" not in get_driver().flow.locked_until  # it claimed without the lock


@on_postgresql
def test_a_keyed_claim_without_the_lock_that_a_key_keeps_short_says_a_slot_is_wanted() -> None:
    """So that the outcome that frees the key wakes the queue's workers, and the next
    claims take the lock until it does (a claim without the lock passes a waiting worker
    by: it would not wake it)."""
    first, second = keyed_job("a"), keyed_job("a")
    serving("w1", 4, ("keyed",))
    get_driver().flow.make_queue_row("keyed")
    before = version("keyed")
    assert claim(queue="keyed", limits=KEYED, limit=1) == [first]
    assert not slot_wanted("keyed")  # it took all its free threads could start
    assert version("keyed") == before  # and wrote nothing else
    assert claim(queue="keyed", limits=KEYED, limit=1) == []
    assert slot_wanted("keyed")
    assert "keyed" not in get_driver().flow.locked_until  # it claimed without the lock
    settle(first)  # written apart, as the settler does: it wakes the workers
    assert get_driver().flow.wake_freed(["keyed"]) == ["keyed"]
    assert claim(queue="keyed", limits=KEYED, limit=1) == [second]


@on_postgresql
def test_a_queue_whose_worker_waits_for_a_slot_is_claimed_under_the_lock(make_job) -> None:
    """Its claims under the lock wake the waiting worker as they free slots, and take the
    mark off."""
    first, _ = make_job(), make_job()
    serving("w1", 4)
    assert claim(limit=1, limits=FAR) == [first.pk]
    Queue.objects.filter(name="default").update(slot_wanted=True)
    with queue_row_locked("KEY SHARE"):
        assert claim_at_once(limit=1, limits=FAR) is None
    get_driver().flow.locked_until.clear()
    get_driver().claim_and_settle(request(limits=FAR, limit=1), [success(first.pk)])
    assert not slot_wanted("default")


@on_postgresql
def test_a_claim_that_skips_the_lock_settles_before_it_claims(make_job) -> None:
    """As a claim of a queue without limits does, for the same reason (a claim may lock a
    row it does not take: settling after it, two claims could deadlock; test_drivers'
    ``test_driver_claim_and_settle_settles_before_it_claims``)."""
    for _ in range(4):
        make_job()
    serving("w1", 4)
    first, second = claim(limit=2, limits=FAR)
    done = [success(first), success(second)]
    # Another claim that skips the lock under way: a claim under the lock would wait for it.
    with ordered_status_writes() as written, queue_row_locked("KEY SHARE"):
        claimed, settled = get_driver().claim_and_settle(request(limits=FAR, limit=2), done)
        assert written() == ["succeeded", "succeeded", "running", "running"]
    assert settled.lost == [] and len(claimed) == 2


@on_postgresql
def test_a_claim_that_skips_the_lock_keeps_what_it_wrote_when_the_claim_under_it_fails(
    make_job,
) -> None:
    """The claim without the lock writes its outcomes and finds too little room; the claim
    under the lock that follows fails: the outcomes are said written, as they are. Raised
    past, they would be given back and written again, as fenced out."""
    for _ in range(4):
        make_job()
    serving("w1", 4)
    limits = QueueLimits(global_limit=5)  # with 2 running, w1's claims of 4 do not fit
    first, _, _ = claim(limit=3, limits=limits)
    done = [success(first)]
    with refusing("refuse_queue_row", "UPDATE", Queue._meta.db_table):
        claimed, settled = get_driver().claim_and_settle(request(limits=limits, limit=2), done)
    assert settled.lost == [] and claimed == []
    assert Job.objects.get(pk=first).status == JobStatus.SUCCEEDED
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 2


@on_postgresql
def test_a_claim_that_skips_the_lock_keeps_its_process_row_until_it_commits(make_job) -> None:
    """Other processes count this process's largest claim while its row is there: the
    sweep that removes a row waits for the claim under way to commit."""
    make_job()
    serving("w1", 4)
    get_driver().flow.make_queue_row("default")
    deleted: list[bool] = []

    def sweep_meanwhile(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "FOR KEY SHARE" in sql and not deleted:
            other = connections.create_connection("default")
            try:
                with other.cursor() as cursor:
                    cursor.execute("SET lock_timeout = '300ms'")
                    try:
                        cursor.execute("DELETE FROM django_jobs_worker WHERE id = %s", ["w1"])
                        deleted.append(True)
                    except Exception as error:  # noqa: BLE001 - the lock's timeout, told below
                        deleted.append("lock timeout" not in str(error))
            finally:
                other.close()
        return result

    get_driver().flow.locked_until.clear()
    with transaction.atomic(), connections["default"].execute_wrapper(sweep_meanwhile):
        assert len(claim(limit=1, limits=FAR)) == 1  # its row locked until the atomic ends
    assert deleted == [False]


@on_postgresql
def test_after_too_little_room_a_process_claims_under_the_lock_for_a_while(make_job) -> None:
    from django_jobs.db.postgresql_limits import LOCKED_AFTER_MISS_SECONDS

    held = [
        make_job(status=JobStatus.RUNNING, lease_owner="x", lease_expires_at=START + LONG).pk
        for _ in range(2)
    ]
    make_job(), make_job()
    serving("w1", 4)
    limits = QueueLimits(global_limit=5)
    get_driver().flow.locked_until.clear()
    assert len(claim(limit=1, limits=limits)) == 1  # 2 running + 4 > 5: under the lock
    Job.objects.filter(pk__in=held).update(lease_expires_at=START)  # lapsed: 1 + 4 fits
    with queue_row_locked("KEY SHARE"):
        with connections["default"].cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        soon = START + timedelta(seconds=LOCKED_AFTER_MISS_SECONDS / 2)
        with pytest.raises(Exception, match="lock timeout"):
            claim(limit=1, limits=limits, now=soon)
        later = START + timedelta(seconds=LOCKED_AFTER_MISS_SECONDS)
        assert len(claim(limit=1, limits=limits, now=later)) == 1
    with connections["default"].cursor() as cursor:
        cursor.execute("SET lock_timeout = 0")


def test_racing_claims_with_and_without_the_lock_never_run_more_than_the_limit(make_job) -> None:
    """Six registered workers claim over and over: the first claims find room for all of
    their largest claims and skip the lock (on PostgreSQL), the later ones take it; however
    they interleave, the jobs running end at the limit, not above. (It fails if claims skip
    the lock without the room check; the overlap of the two kinds of claim, a race of
    microseconds, is held by the tests with another session holding the row.)"""
    limits = QueueLimits(global_limit=13)  # 6 x 2 = 12: room for all while 1 runs
    for _ in range(40):
        make_job()
    owners = [f"w{n}" for n in range(6)]
    for owner in owners:
        serving(owner, 2)
    get_driver().flow.make_queue_row("default")

    def take(owner: str) -> None:
        empty = 0
        while empty < 3:
            empty = 0 if claim(limit=2, limits=limits, owner=owner) else empty + 1

    errors = race(owners, take)
    assert errors == []
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 13
