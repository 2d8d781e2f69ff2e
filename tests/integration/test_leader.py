"""The leader lease: the driver's guarded update on every database, this process's view of
it (:class:`~django_jobs.worker.leader.leadership.Leadership`), and a server that leaves the
chores to the leader."""

import logging
import threading
from datetime import timedelta
from functools import partial

import pytest

from django_jobs.db import get_driver
from django_jobs.models import Job, JobStatus, Leader, RecurringJob
from django_jobs.testing import FakeClock
from django_jobs.worker import Worker, serve
from django_jobs.worker.clock import SystemClock
from django_jobs.worker.leader.leadership import NAME, Leadership
from tests.conftest import START, wait_until
from tests.support.leaders import believing_it_leads
from tests.support.threads import in_a_thread, race

LEASE = 30


def lead(owner, now=START, lease=LEASE):
    return get_driver().leader.lead(NAME, owner, now, lease)


# -- the driver's operation: the same on SQLite, PostgreSQL and MariaDB ----------------


@pytest.mark.django_db
def test_the_first_to_ask_leads_from_epoch_one_and_the_others_see_it():
    row = lead("a")
    assert (row.owner, row.epoch) == ("a", 1)
    assert row.elected_at == START
    assert row.expires_at == START + timedelta(seconds=LEASE)
    seen = lead("b", START + timedelta(seconds=1))
    assert seen == row  # b does not take a lease that holds; it sees who has it
    assert Leader.objects.get().owner == "a"


@pytest.mark.django_db
def test_the_holder_renews_in_the_same_epoch_and_a_lapsed_lease_passes_on():
    lead("a")
    renewed = lead("a", START + timedelta(seconds=10))
    assert (renewed.owner, renewed.epoch, renewed.elected_at) == ("a", 1, START)
    assert renewed.expires_at == START + timedelta(seconds=10 + LEASE)
    # Not yet lapsed at its expiry minus a microsecond; lapsed at its expiry.
    end = renewed.expires_at
    assert lead("b", end - timedelta(microseconds=1)).owner == "a"
    taken = lead("b", end)
    assert (taken.owner, taken.epoch, taken.elected_at) == ("b", 2, end)
    # The old holder, back, finds the new epoch and takes nothing.
    assert lead("a", end + timedelta(seconds=1)) == taken


@pytest.mark.django_db
def test_resigning_ends_the_lease_now_for_its_epoch_only():
    driver = get_driver()
    first = lead("a")
    assert driver.leader.resign(NAME, "a", first.epoch + 1, START) is False  # not its epoch
    assert driver.leader.resign(NAME, "b", first.epoch, START) is False  # not its lease
    assert driver.leader.resign(NAME, "a", first.epoch, START + timedelta(seconds=1)) is True
    taken = lead("b", START + timedelta(seconds=1))
    assert (taken.owner, taken.epoch) == ("b", 2)


@pytest.mark.django_db
def test_a_row_written_by_hand_with_no_expiry_is_free():
    Leader.objects.create(name=NAME, owner="gone", epoch=7, expires_at=None)
    row = lead("a")
    assert (row.owner, row.epoch) == ("a", 8)


def race_for_the_lease(owners: list[str], when) -> dict[str, str]:
    """Each owner asks for the lease on a thread and a connection of its own, all at
    once; what each was told holds it."""
    seen: dict[str, str] = {}

    def ask(owner: str) -> None:
        seen[owner] = get_driver().leader.lead(NAME, owner, when, LEASE).owner

    assert race(owners, ask) == []
    return seen


@pytest.mark.django_db(transaction=True)
def test_processes_racing_for_an_empty_table_elect_exactly_one():
    # Eight at the same instant, twenty times over a row deleted before each round:
    # every round has one leader, and all agree on it.
    for round_ in range(20):
        Leader.objects.all().delete()
        seen = race_for_the_lease([f"w{n}" for n in range(8)], START + timedelta(minutes=round_))
        assert len(set(seen.values())) == 1, seen
        [row] = Leader.objects.all()
        assert (row.owner, row.epoch) == (next(iter(seen.values())), 1)


@pytest.mark.django_db(transaction=True)
def test_processes_racing_for_a_lapsed_lease_elect_exactly_one():
    lead("old")
    for round_ in range(1, 11):
        when = START + timedelta(seconds=LEASE * 2 * round_)  # the last lease has lapsed
        # New names each round: the last holder, asking again, would renew its own epoch.
        seen = race_for_the_lease([f"r{round_}w{n}" for n in range(8)], when)
        assert len(set(seen.values())) == 1, seen
        assert Leader.objects.get().epoch == round_ + 1


# -- this process's view of the lease -----------------------------------------------


def leadership(owner, clock, lease=LEASE, call_timeout=5.0):
    return Leadership(
        get_driver(), owner, clock=clock, lease_seconds=lease, call_timeout_seconds=call_timeout
    )


@pytest.mark.django_db
def test_a_leader_acts_only_while_its_lease_holds_past_a_chore_deadline(caplog):
    clock = FakeClock(START)
    me = leadership("a", clock)
    assert me.chore_seconds == 5.0  # the call deadline, under a third of the lease
    assert me.acts() is False  # not yet elected
    caplog.set_level(logging.INFO, logger="django_jobs")
    assert me.elect() is True
    assert (me.epoch, me.acts()) == (1, True)
    assert me.next_try == START + timedelta(seconds=LEASE / 3)
    # It cannot renew (the database does not answer, say): it stops 5 s before the end.
    clock.advance(LEASE - 5 - 0.001)
    assert me.acts() is True
    clock.advance(0.001)
    assert me.acts() is False
    assert me.acts() is False
    lines = [r.getMessage() for r in caplog.records if r.event == "leader_lost"]
    assert lines == [
        "worker a stops acting as leader: it could not renew the leader lease (epoch 1), "
        "which lapses at 2026-01-05 12:00:30 UTC"
    ]


@pytest.mark.django_db
def test_a_follower_tries_again_when_the_lease_lapses_and_takes_it(caplog):
    clock = FakeClock(START)
    lead("a", START, lease=8)  # lapses at START + 8 s, before a third of 30 s
    me = leadership("b", clock)
    caplog.set_level(logging.INFO, logger="django_jobs")
    assert me.elect() is False
    assert me.seen is not None and me.seen.owner == "a"
    assert me.next_try == START + timedelta(seconds=8)
    clock.set(me.next_try)
    assert me.due(clock.now())
    assert me.elect() is True
    assert me.epoch == 2
    [line] = [r for r in caplog.records if r.event == "leader_elected"]
    assert line.getMessage().startswith("worker b leads (epoch 2)")


@pytest.mark.django_db
def test_a_leader_that_was_stopped_past_its_lease_does_not_lead_on_waking(caplog):
    clock = FakeClock(START)
    me = leadership("a", clock)
    me.elect()
    clock.advance(LEASE + 5)  # SIGSTOPped; meanwhile b took the lease
    lead("b", clock.now())
    caplog.set_level(logging.INFO, logger="django_jobs")
    assert me.acts() is False  # before it asks the database
    assert me.elect() is False
    assert me.seen is not None and (me.seen.owner, me.seen.epoch) == ("b", 2)


@pytest.mark.django_db
def test_a_leader_that_finds_another_holding_the_lease_says_so():
    clock = FakeClock(START)
    me = leadership("a", clock)
    me.elect()
    Leader.objects.filter(name=NAME).update(owner="b", epoch=2)  # by hand
    clock.advance(LEASE / 3)
    assert me.elect() is False
    assert (me.term, me.acts()) == (None, False)


@pytest.mark.django_db
def test_resigning_hands_the_lease_over_and_a_follower_has_nothing_to_resign():
    clock = FakeClock(START)
    me, other = leadership("a", clock), leadership("b", clock)
    me.elect()
    other.elect()
    other.resign()  # a follower: nothing written
    assert Leader.objects.get().owner == "a"
    me.resign()
    assert me.acts() is False
    assert other.elect() is True
    assert other.epoch == 2


# -- a server leaves the chores to the leader ---------------------------------------

FAST = {"POLL_SECONDS": 0.02, "MAINTENANCE_SECONDS": 0.05, "LEADER_LEASE_SECONDS": 1.5}


@pytest.mark.django_db(transaction=True)
def test_a_follower_runs_no_chore_until_the_leader_lease_lapses_then_takes_it_over(
    settings, make_job
):
    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": 1}}}
    now = SystemClock().now()
    # Another process leads, for 1.5 s more; a dead worker's job waits to be taken back,
    # and a schedule is due.
    lead("far:1:ab", now, lease=1.5)
    lost = make_job(
        status=JobStatus.RUNNING, lease_owner="dead:1:ab", lease_expires_at=now, queue="other"
    )
    RecurringJob.objects.create(  # yearly: no second occurrence falls within the test
        name="yearly", cron="0 0 1 1 *", job_name="tests.ok", next_run_at=now
    )
    worker = Worker(clock=SystemClock())
    with in_a_thread(partial(serve, worker)) as thread:
        threading.Event().wait(0.8)  # many maintenance passes: none ran a chore
        assert Job.objects.get(pk=lost.pk).status == JobStatus.RUNNING
        assert not Job.objects.filter(schedule="yearly").exists()
        assert worker.leadership.acts() is False
        # The lease lapses: the worker takes it over at once, and does the chores.
        wait_until(lambda: Job.objects.get(pk=lost.pk).status == JobStatus.PENDING, timeout=5)
        wait_until(lambda: Job.objects.filter(schedule="yearly").exists(), timeout=5)
        assert Job.objects.filter(schedule="yearly").count() == 1
        assert Leader.objects.get().owner == worker.owner
        assert Leader.objects.get().epoch == 2
    assert not thread.is_alive()
    # At its stop it handed the lease over.
    assert Leader.objects.get().expires_at <= SystemClock().now()


@pytest.mark.django_db(transaction=True)
def test_two_workers_that_both_believe_they_lead_double_no_chore(settings, make_job, caplog):
    # What two processes do whose leases overlapped: both run every chore, on every pass.
    settings.DJANGO_JOBS = {**FAST, "QUEUES": {"default": {"workers": 1}}}
    now = SystemClock().now()
    lapsed = [
        make_job(
            status=JobStatus.RUNNING,
            lease_owner="dead:1:ab",
            lease_expires_at=now - timedelta(seconds=1),
            queue="other",  # served by neither: each stays pending once taken back
            attempt=1,
            attempts_used=1,
        )
        for _ in range(30)
    ]
    # Yearly: a run that crosses a minute's boundary sees no second occurrence fire.
    schedules = [f"yearly-{n}" for n in range(10)]
    for name in schedules:
        RecurringJob.objects.create(
            name=name,
            cron="0 0 1 1 *",
            job_name="tests.ok",
            queue="other",
            next_run_at=now - timedelta(days=1),  # one missed run, due now
        )
    workers = [believing_it_leads(Worker(clock=SystemClock())) for _ in range(2)]
    stop = threading.Event()
    threads = [threading.Thread(target=serve, args=(w, stop)) for w in workers]
    caplog.set_level(logging.WARNING, logger="django_jobs")
    for thread in threads:
        thread.start()
    try:
        wait_until(
            lambda: (
                not Job.objects.filter(pk__in=[j.pk for j in lapsed], status="running").exists()
                and Job.objects.filter(schedule__in=schedules).count() >= len(schedules)
            ),
            timeout=10,
        )
        threading.Event().wait(0.5)  # many more passes of both
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert [thread.is_alive() for thread in threads] == [False, False]
    fired = Job.objects.filter(schedule__in=schedules)
    assert sorted(fired.values_list("schedule", flat=True)) == sorted(schedules)
    taken_back = [
        r.job_id for r in caplog.records if getattr(r, "event", "") == "job_lease_expired"
    ]
    assert sorted(taken_back) == sorted(j.pk for j in lapsed)
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in lapsed]).values_list("status", flat=True)
    ) == {JobStatus.PENDING}
