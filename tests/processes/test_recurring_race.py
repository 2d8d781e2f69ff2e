"""Scheduler loops in separate processes racing on one database, with and without re-adds."""

import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from freezegun import freeze_time

from django_jobs import add_recurring_job
from django_jobs.cron import occurrences
from django_jobs.models import Job
from tests.conftest import ROOT, database_url

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 3, 29, 0, 0, tzinfo=timezone.utc)  # spans Paris's DST jump
MINUTES = 90
SCHEDULES = {
    "every-minute": ("* * * * *", "UTC"),
    "every-2": ("*/2 * * * *", "UTC"),
    "every-5-paris": ("*/5 * * * *", "Europe/Paris"),
    "half-past-paris": ("30 * * * *", "Europe/Paris"),
}


def add_schedules() -> Counter[tuple[str, datetime]]:
    """Add the schedules at START; return each occurrence over MINUTES, counted once."""
    with freeze_time(START):
        for name, (cron, zone) in SCHEDULES.items():
            add_recurring_job(name, cron, "demo.noop", {"schedule": name}, timezone=zone)
    end = START + timedelta(minutes=MINUTES, seconds=30)
    expected = Counter(
        {
            (name, when): 1
            for name, (cron, zone) in SCHEDULES.items()
            for when in occurrences(cron, zone, START, end)
        }
    )
    assert len(expected) >= 50
    return expected


def manage(*args: str) -> subprocess.Popen[bytes]:
    env = {"DATABASE_URL": database_url(), "PATH": "/usr/bin:/bin"}
    if "JOBS_PGBOUNCER" in os.environ:  # through a pooler: no prepared statements
        env["JOBS_PGBOUNCER"] = os.environ["JOBS_PGBOUNCER"]
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def schedulers(count: int, *after: Path) -> list[subprocess.Popen[bytes]]:
    waits = [argument for path in after for argument in ("--after", str(path))]
    command = ["fire_schedules", "--start", START.isoformat(), "--minutes", str(MINUTES)]
    return [manage(*command, *waits) for _ in range(count)]


def outputs_of(processes: list[subprocess.Popen[bytes]]) -> list[str]:
    outputs = [process.communicate(timeout=150)[0].decode() for process in processes]
    assert [process.returncode for process in processes] == [0] * len(processes), outputs
    return outputs


def fired() -> Counter[tuple[str, datetime]]:
    return Counter((job.payload["schedule"], job.run_at) for job in Job.objects.all())


def test_recurring_three_racing_schedulers_enqueue_each_occurrence_exactly_once():
    expected = add_schedules()
    outputs = outputs_of(schedulers(3))
    assert fired() == expected  # every occurrence once: none twice, none skipped
    per_process = [int(output.split()[-1]) for output in outputs]
    assert sum(per_process) == len(expected)


def test_recurring_re_adds_racing_schedulers_enqueue_each_occurrence_exactly_once(tmp_path):
    # Every runjobs start re-adds the schedules from settings while others fire them.
    expected = add_schedules()
    ready = [tmp_path / f"ready-{index}" for index in range(2)]
    stop = tmp_path / "stop"
    readders = [
        manage("readd_schedules", "--ready", str(path), "--stop", str(stop)) for path in ready
    ]
    try:
        outputs_of(schedulers(2, *ready))
    finally:
        stop.touch()
    rounds = [int(output.split()[-1]) for output in outputs_of(readders)]
    assert min(rounds) >= 1
    assert fired() == expected  # a re-add never moves next_run_at back to a fired occurrence
