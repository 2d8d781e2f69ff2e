"""``runjobs --processes``: the supervisor's decisions with fake children and a moved clock,
and the ``PROCESSES`` setting."""

from __future__ import annotations

import argparse
import signal
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf import MAX_PROCESSES, cpu_cores, settings
from django_jobs.management.commands.runjobs import processes_option
from django_jobs.worker.hosting.supervisor import (
    CONFIG_EXIT,
    Backoff,
    Supervisor,
    Verdict,
    describe_status,
    verdict,
)


class FakeChild:
    """A child process: ``poll()`` is None until ``exit(status)``; signals are recorded."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.status

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)

    def exit(self, status: int) -> None:
        self.status = status


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def supervisor(count: int = 2, **options: Any) -> tuple[Supervisor, list[FakeChild], Clock]:
    clock = Clock()
    started: list[FakeChild] = []

    def spawn(number: int) -> Any:
        started.append(FakeChild(100 + len(started)))
        return started[-1]

    made = Supervisor(count, spawn=spawn, monotonic=clock, **options)
    made.start_all()
    return made, started, clock


# -- backoff -----------------------------------------------------------------


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_healthy_run():
    backoff = Backoff(first=1, cap=30, healthy_after=60)
    assert [backoff.after_exit(lived=0.5) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.after_exit(lived=60) == 1  # it ran long enough: not a crash loop
    assert backoff.after_exit(lived=1) == 2


def test_backoff_of_children_killed_after_serving_ten_seconds_stays_at_a_second():
    """A burst of kills (an OOM killer, an operator) of children that had served: each slot
    is up again after a second, not down for 30 s as if it were a crash loop."""
    backoff = Backoff()
    assert [backoff.after_exit(lived=12) for _ in range(6)] == [1, 1, 1, 1, 1, 1]
    crashing = Backoff()
    assert [crashing.after_exit(lived=0.5) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]


def test_supervisor_restarts_a_dead_child_after_the_backoff_not_before():
    made, started, clock = supervisor()
    started[0].exit(-signal.SIGKILL)
    made.step()
    assert len(started) == 2  # not at once
    clock.now += 0.99
    made.step()
    assert len(started) == 2
    clock.now += 0.01
    made.step()
    assert len(started) == 3  # child 0 again, after 1 s
    started[2].exit(1)  # dies at once again: 2 s this time
    made.step()
    clock.now += 1.5
    made.step()
    assert len(started) == 3
    clock.now += 0.5
    made.step()
    assert len(started) == 4
    assert started[1].status is None and started[1].signals == []  # the other one untouched


def test_supervisor_logs_each_restart_with_the_status_and_the_delay(caplog):
    made, started, clock = supervisor()
    clock.now += 5
    started[1].exit(-signal.SIGKILL)
    with caplog.at_level("WARNING", logger="django_jobs.worker.hosting.supervisor"):
        made.step()
    [record] = caplog.records
    assert record.event == "supervisor_restarting"
    assert (record.pid, record.status, record.delay) == (101, -signal.SIGKILL, 1.0)
    assert record.getMessage() == (
        "worker process 1 (pid 101) ended (killed by SIGKILL) after 5.0 s; "
        "starting it again in 1.0 s"
    )


def test_verdict_restarts_unless_stopping_drained_or_misconfigured():
    assert verdict(1, stopping=False, burst=False) is Verdict.RESTART
    assert verdict(0, stopping=False, burst=False) is Verdict.RESTART  # stopped by someone else
    assert verdict(-9, stopping=False, burst=True) is Verdict.RESTART
    assert verdict(0, stopping=False, burst=True) is Verdict.DONE  # drained its queues
    assert verdict(-9, stopping=True, burst=False) is Verdict.DONE
    assert verdict(CONFIG_EXIT, stopping=False, burst=False) is Verdict.GIVE_UP
    assert verdict(CONFIG_EXIT, stopping=False, burst=True) is Verdict.GIVE_UP


def test_describe_status_names_the_signal():
    assert describe_status(-9) == "killed by SIGKILL"
    assert describe_status(3) == "exit status 3"


def test_supervisor_in_burst_is_done_when_every_child_drained():
    made, started, clock = supervisor(burst=True)
    started[0].exit(0)
    made.step()
    assert not all(slot.done for slot in made.slots)
    started[1].exit(0)
    made.step()
    assert all(slot.done for slot in made.slots)
    assert len(started) == 2  # neither started again


def test_supervisor_forwards_one_signal_per_signal_two_at_most_sigterm_then_sigint():
    made, started, clock = supervisor()
    made.on_signal()
    made.step()
    assert [child.signals for child in started] == [[signal.SIGTERM]] * 2
    made.step()  # no new signal: nothing more forwarded
    assert [child.signals for child in started] == [[signal.SIGTERM]] * 2
    made.on_signal()
    made.on_signal()
    made.step()
    # SIGINT the second time: two SIGTERMs in a row could reach a child as one.
    assert [child.signals for child in started] == [[signal.SIGTERM, signal.SIGINT]] * 2


def test_supervisor_does_not_restart_during_a_stop_and_cancels_a_pending_restart():
    made, started, clock = supervisor()
    started[0].exit(-signal.SIGKILL)
    made.step()  # child 0 waits for its restart
    made.on_signal()
    made.step()
    assert made.slots[0].done
    started[1].exit(0)
    clock.now += 60
    made.step()
    assert all(slot.done for slot in made.slots)
    assert len(started) == 2


def test_supervisor_gives_up_on_a_child_that_cannot_start_and_stops_the_others():
    made, started, clock = supervisor()
    started[0].exit(CONFIG_EXIT)
    made.step()
    assert made.gave_up
    assert started[1].signals == [signal.SIGTERM]
    started[1].exit(0)
    clock.now += 60
    made.step()
    assert all(slot.done for slot in made.slots)
    assert len(started) == 2


@pytest.mark.parametrize(
    ("signals", "gave_up", "status"), [(1, False, 0), (2, False, 1), (0, True, 1)]
)
def test_supervisor_exit_status_is_1_when_forced_or_given_up(signals, gave_up, status):
    children: list[FakeChild] = []

    def spawn(number: int) -> Any:
        children.append(FakeChild(number))
        children[-1].exit(CONFIG_EXIT if gave_up else 0)  # ended before the first look
        return children[-1]

    made = Supervisor(2, spawn=spawn, poll_seconds=0)
    made.signals = signals
    assert made.run() == status


# -- the setting -------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "4", "all", None, MAX_PROCESSES + 1])
def test_check_processes_refuses_what_is_not_a_count_or_auto(value):
    with override_settings(DJANGO_JOBS={"PROCESSES": value}):
        [error] = check_settings()
        assert error.id == "django_jobs.E011"
        assert "DJANGO_JOBS['PROCESSES'] must be a whole number from 1" in error.msg
        assert "'auto'" in error.hint
        with pytest.raises(ImproperlyConfigured, match="PROCESSES"):
            settings.process_count()


@pytest.mark.parametrize("value", [1, 4, MAX_PROCESSES, "auto"])
def test_check_processes_takes_a_count_or_auto(value):
    with override_settings(DJANGO_JOBS={"PROCESSES": value}):
        assert check_settings() == []


def test_processes_auto_is_one_per_core_and_the_option_overrides_the_setting():
    assert settings.process_count() == 1  # the default
    with override_settings(DJANGO_JOBS={"PROCESSES": "auto"}):
        assert settings.process_count() == cpu_cores() >= 1
        assert settings.process_count(3) == 3
    with override_settings(DJANGO_JOBS={"PROCESSES": 3}):
        assert settings.process_count("auto") == cpu_cores()


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5", ""])
def test_processes_option_refuses_what_is_not_a_count_or_auto(text):
    with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
        processes_option(text)


def test_processes_option_takes_a_count_or_auto():
    assert processes_option("4") == 4
    assert processes_option("auto") == "auto"


@pytest.mark.parametrize("args", [("--processes", "2"), ("--processes", "auto")])
def test_runjobs_refuses_processes_with_reload(args):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    if args[1] == "auto" and cpu_cores() == 1:
        pytest.skip("one core: auto is one process")
    with pytest.raises(CommandError, match="--reload runs one worker process, not"):
        call_command("runjobs", "--reload", *args)


def test_runjobs_refuses_the_processes_setting_with_reload():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with override_settings(DJANGO_JOBS={"PROCESSES": 3}):
        with pytest.raises(CommandError, match=r"not 3: give --processes 1 with --reload"):
            call_command("runjobs", "--reload")
