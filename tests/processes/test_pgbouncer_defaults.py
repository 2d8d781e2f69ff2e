"""Behind PgBouncer 1.18 in transaction mode with ``DJANGO_JOBS["PREPARED_STATEMENTS"]``
left at its default (on): a site that missed the scaling guide's line.

The pooler hands each transaction the server connection it has free, with the
statements other clients prepared on it under psycopg's names (``_pg3_0``...),
and without the ones this client prepared elsewhere. A served site's view
enqueues, in a transaction of its own and without one, then two ``runjobs``
drain: every request and every job succeeds, each job runs once, and each process
finds the pooler and says once that it prepares no statement there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_jobs.models import Job, JobStatus
from testproject.example.models import Execution
from tests.conftest import ROOT, RunjobsProcesses, database_url, wait_until
from tests.support.served import Browser, free_port

pytestmark = [pytest.mark.prepared_statements, pytest.mark.django_db(transaction=True)]

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# scripts/test installs PgBouncer and sets this, so that CI never skips this test quietly.
PGBOUNCER_REQUIRED = os.environ.get("JOBS_TEST_PGBOUNCER") == "required"
REQUESTS = 8  # each enqueues two jobs
WARNING = 'DJANGO_JOBS["PREPARED_STATEMENTS"]'


@pytest.fixture
def pooled_url() -> Iterator[str]:
    """The test database through a PgBouncer of this test's own, in transaction mode (its
    directory in /tmp, which the server's user, whom PgBouncer runs as under root, can
    reach)."""
    if not Path(PGBOUNCER).exists():
        if PGBOUNCER_REQUIRED:
            raise AssertionError(f"{PGBOUNCER} is missing")
        pytest.skip("pgbouncer is missing (apt-get install pgbouncer)")
    script = [sys.executable, str(ROOT / "scripts" / "pgbouncer.py")]
    directory = tempfile.mkdtemp(prefix="django-jobs-test-pgbouncer.")
    started = subprocess.run(  # noqa: S603
        [*script, "start", directory, database_url(direct=True)],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    try:
        yield started.stdout.strip()
    finally:  # its server connections closed, so that the test database can be dropped
        subprocess.run([*script, "stop", directory], check=False, timeout=30)  # noqa: S603
        shutil.rmtree(directory, ignore_errors=True)


def test_pgbouncer_with_prepared_statements_on_serves_every_enqueue_and_claim(
    runjobs_process: RunjobsProcesses, pooled_url: str
) -> None:
    env = {
        "DATABASE_URL": pooled_url,
        "LISTEN_DATABASE_URL": database_url(direct=True),
        "JOBS_PGBOUNCER": "1",
        "JOBS_KEEP_PREPARED_STATEMENTS": "1",
        "DEBUG": "false",  # a logged connection prepares nothing
    }
    port = free_port()
    site = runjobs_process.start("--noreload", f"127.0.0.1:{port}", command="runserver", env=env)
    browser = Browser(f"http://127.0.0.1:{port}")
    wait_until(browser.up, timeout=30)
    job_ids: list[int] = []
    for _ in range(REQUESTS):  # each request on a new connection, its names from _pg3_0
        status, body = browser.post("/record/", {})
        assert status == 202, f"{body[:2000]}\n{runjobs_process.log(site)}"
        job_ids += json.loads(body)["job_ids"]

    workers = [runjobs_process.start("--burst", "--queue", "default", env=env) for _ in range(2)]
    for worker in workers:
        assert worker.wait(60) == 0, runjobs_process.log(worker)
    assert Counter(Execution.objects.values_list("job_id", flat=True)) == Counter(job_ids)
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == len(job_ids))

    logs = [runjobs_process.log(process) for process in (site, *workers)]
    # Each process finds the pooler and says once that it prepares nothing there; none
    # ever prepared a statement another client's could stand in for.
    assert [log.count(WARNING) for log in logs] == [1, 1, 1], logs
    assert all(log.count("through a pooler") == 1 for log in logs), logs
    assert not any("lost a prepared statement" in log for log in logs), logs
    assert not any("worker step failed" in log for log in logs), logs
