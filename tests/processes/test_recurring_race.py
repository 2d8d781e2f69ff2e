"""Three scheduler loops in separate processes racing on one database."""

import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone

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


def test_recurring_three_racing_schedulers_enqueue_each_occurrence_exactly_once():
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
    env = {"DATABASE_URL": database_url(), "PATH": "/usr/bin:/bin"}
    command = [
        sys.executable,
        str(ROOT / "manage.py"),
        "fire_schedules",
        "--start",
        START.isoformat(),
        "--minutes",
        str(MINUTES),
    ]
    processes = [
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(3)
    ]
    outputs = [process.communicate(timeout=120)[0].decode() for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0], outputs
    fired = Counter((job.payload["schedule"], job.run_at) for job in Job.objects.all())
    assert fired == expected  # every occurrence once: none twice, none skipped
    per_process = [int(output.split()[-1]) for output in outputs]
    assert sum(per_process) == len(expected)
