"""The report of a process that a test waited for in vain: what the database says, and what
each of its threads was doing, short enough to survive a report that keeps only the start."""

import re
import threading

import pytest
from django.db import connection, connections, transaction

from django_jobs.models import Job
from tests.conftest import StillRunning, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def hold_a_row_lock(job_id: int, held: threading.Event, release: threading.Event) -> None:
    """On a connection of its own: a transaction that holds ``job_id``'s row until told."""
    try:
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=job_id)
            held.set()
            release.wait(30)
    finally:
        connections.close_all()


def test_a_process_that_outlives_its_wait_is_reported_by_its_threads_and_the_database(
    runjobs_process,
):
    job = Job.objects.create(name="example.record")
    held, release = threading.Event(), threading.Event()
    # On a server, a transaction of the test's that holds a row, for the report to list (on
    # SQLite it would hold the whole database: the worker would not get to serve).
    holder = threading.Thread(target=hold_a_row_lock, args=(job.pk, held, release))
    if connection.vendor != "sqlite":
        holder.start()
        assert held.wait(10)
    try:
        process = runjobs_process.start("--queue", "default")  # serves until stopped
        wait_until(lambda: "serving queues" in runjobs_process.log(process), timeout=30)
        with pytest.raises(StillRunning) as raised:
            process.wait(0.5)
    finally:
        release.set()
        if holder.is_alive():
            holder.join(10)
    report = str(raised.value)
    assert process.returncode is not None  # aborted, not left running
    assert "serving queues" in report.split("its threads' stacks:", 1)[0]  # the log's tail
    stacks = report.split("its threads' stacks:\n", 1)[1]
    # The thread that took the signal first, whole: the main thread, in the server's loop.
    assert stacks.startswith("Current thread 0x"), report
    first = stacks.split("\n\n", 1)[0]
    assert "django_jobs/worker/server.py" in first, report
    assert "in _bootstrap_inner" not in stacks, report  # threading's own frames left out
    # Threads that wait for work are a line each, named by their own innermost frame.
    idle = re.findall(r'^Thread 0x[0-9a-f]+ waits for work, in "([^"]+)"', stacks, re.M)
    assert "django_jobs/worker/dispatcher.py" in idle, report
    if connection.vendor == "sqlite":
        assert "the database's" not in report
    else:  # the test's transaction that holds the row, as the server lists it
        listed = report.split("the database's ", 1)[1].split("its threads' stacks:", 1)[0]
        held_open = "idle in transaction" if connection.vendor == "postgresql" else "| Sleep |"
        assert held_open in listed, report
