"""The leader lease between real ``runjobs`` processes: kill -9, SIGSTOP, a graceful stop.

The processes run with a leader lease of 3 s (the tests' ``runjobs`` default): renewed
every second, and a chore's deadline of one second.
"""

import os
import signal
import time
from collections.abc import Callable

import pytest
from django.db import connection

from django_jobs.models import Leader
from tests.conftest import wait_until
from tests.support.leaders import leader, pid_of

pytestmark = pytest.mark.django_db(transaction=True)

LEADER_LEASE = 3.0


def leading_pid(processes: list, since: Callable[[Leader], bool] = lambda row: True) -> int:
    pids = {process.pid for process in processes}

    def found() -> int | None:
        row = leader()
        if row is None or not row.owner or not since(row):
            return None
        pid = pid_of(row.owner)
        return pid if pid in pids else None

    try:
        return wait_until(found, timeout=40)  # two Django start-ups on a busy machine
    except AssertionError:
        logs = "\n".join(process.log_path.read_text(errors="replace") for process in processes)
        raise AssertionError(f"no leader among {sorted(pids)}: {leader()}\n{logs}") from None


def two_workers(runjobs_process) -> list:
    return [runjobs_process.start("--queue", "default") for _ in range(2)]


def test_a_leader_killed_with_sigkill_is_followed_within_one_leader_lease(runjobs_process):
    processes = two_workers(runjobs_process)
    first = leading_pid(processes)
    epoch = leader().epoch
    [other] = [p for p in processes if p.pid != first]
    os.kill(first, signal.SIGKILL)
    killed_at = time.monotonic()
    second = leading_pid(processes, since=lambda row: row.epoch > epoch)
    took = time.monotonic() - killed_at
    assert second == other.pid
    assert leader().epoch == epoch + 1
    # Within one lease of its last renewal, which came before the kill; one poll of slack.
    assert took < LEADER_LEASE + 0.5, took
    # The process logs its election once its lease is written: the log may trail the row.
    said = f"leads (epoch {epoch + 1})"
    wait_until(lambda: said in runjobs_process.log(other), timeout=5)


def test_a_leader_stopped_past_its_lease_does_not_act_on_waking(runjobs_process):
    if connection.vendor == "sqlite":
        pytest.skip(
            "SQLite has one write lock: a process stopped inside a write transaction (a "
            "claim, every poll) holds it, and every other process waits for it"
        )
    processes = two_workers(runjobs_process)
    first = leading_pid(processes)
    epoch = leader().epoch
    [stopped] = [p for p in processes if p.pid == first]
    # Stopped once it knows it leads: the row is written before the process reads the
    # answer, and a process stopped in between wakes to a call past its deadline, never
    # having led as far as it knows, with nothing to say.
    wait_until(lambda: f"leads (epoch {epoch})" in runjobs_process.log(stopped), timeout=5)
    os.kill(first, signal.SIGSTOP)
    try:
        leading_pid(processes, since=lambda row: row.epoch > epoch)
        time.sleep(0.5)
    finally:
        os.kill(first, signal.SIGCONT)
    # On waking it finds its lease over: it says so, and does not lead again.
    try:
        wait_until(
            lambda: (
                "no longer leads" in runjobs_process.log(stopped)
                or "stops acting as leader" in runjobs_process.log(stopped)
            ),
            timeout=20,
        )
    except AssertionError:
        raise AssertionError(f"it did not say so: {runjobs_process.log(stopped)}") from None
    time.sleep(LEADER_LEASE / 3 + 0.5)  # a renewal's interval: it tries again and fails
    row = leader()
    assert row.epoch == epoch + 1 and pid_of(row.owner) != first
    log = runjobs_process.log(stopped)
    assert log.count("leads (epoch") == 1, log  # its own first election only


def test_a_graceful_stop_hands_the_lease_over_at_once(runjobs_process):
    processes = two_workers(runjobs_process)
    first = leading_pid(processes)
    epoch = leader().epoch
    [going] = [p for p in processes if p.pid == first]
    os.kill(first, signal.SIGTERM)
    assert going.wait(20) == 0, runjobs_process.log(going)
    stopped_at = time.monotonic()
    assert "hands over the leader lease" in runjobs_process.log(going)
    second = leading_pid(processes, since=lambda row: row.epoch > epoch)
    assert second != first
    # The follower tries every third of the lease: no need to wait for it to lapse.
    assert time.monotonic() - stopped_at < LEADER_LEASE / 3 + 0.5
