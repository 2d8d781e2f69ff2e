"""``runjobs`` started before its database answers: it waits, saying so in one line a try."""

import os
import signal
import time

import pytest
from django.db import connection

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus
from tests.conftest import RunjobsProcesses, wait_until
from tests.processes.test_partition import through
from tests.support.netfault import fault_proxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skip_locked]


def test_runjobs_waits_for_a_database_that_is_not_up_yet_then_serves(
    runjobs_process: RunjobsProcesses,
):
    settings = connection.settings_dict
    with fault_proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"])) as proxy:
        proxy.set_mode("reset")  # every connection refused at once, as a server not up yet
        worker = runjobs_process.start("--queue", "default", env={"DATABASE_URL": through(proxy)})
        wait_until(lambda: runjobs_process.log(worker).count("is unreachable") >= 2, timeout=20)
        assert worker.poll() is None
        job = schedule_job("example.record", {})
        proxy.set_mode("forward")  # the server is up
        wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=40)
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(20) == 0, runjobs_process.log(worker)
    log = runjobs_process.log(worker)
    assert "Traceback" not in log
    assert "database 'default' is unreachable (" in log


def test_runjobs_waiting_for_the_database_stops_at_once_on_sigterm(
    runjobs_process: RunjobsProcesses,
):
    settings = connection.settings_dict
    with fault_proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"])) as proxy:
        proxy.set_mode("reset")
        worker = runjobs_process.start("--queue", "default", env={"DATABASE_URL": through(proxy)})
        wait_until(lambda: "is unreachable" in runjobs_process.log(worker), timeout=20)
        started = time.monotonic()
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(10) == 0, runjobs_process.log(worker)
        assert time.monotonic() - started < 5
    assert "Traceback" not in runjobs_process.log(worker)


def test_runjobs_burst_with_no_database_fails_in_one_line(runjobs_process: RunjobsProcesses):
    settings = connection.settings_dict
    with fault_proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"])) as proxy:
        proxy.set_mode("reset")
        worker = runjobs_process.start("--burst", env={"DATABASE_URL": through(proxy)})
        assert worker.wait(30) == 1
    lines = runjobs_process.log(worker).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("CommandError: Database 'default' is unreachable: ")
