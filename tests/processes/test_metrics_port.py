"""``runjobs --metrics-port``: a real worker's own metrics, scraped over HTTP and parsed by
prometheus_client's parser; under ``--processes 2``, one endpoint for both children."""

from __future__ import annotations

import os
import signal
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Job, JobStatus
from tests.conftest import wait_until
from tests.support.served import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - 127.0.0.1
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def outcomes(found, job: str, outcome: str) -> float:
    key = ("django_jobs_outcomes_total", (("job", job), ("outcome", outcome), ("queue", "default")))
    return found.get(key, 0.0)


def reachable(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def test_a_worker_serves_its_outcomes_and_run_times(runjobs_process):
    port = free_port()
    ok = schedule_jobs([{"job": "example.record", "payload": {"n": n}} for n in range(5)])
    broken = schedule_job("demo.broken")
    process = runjobs_process.start("--queue", "default", "--metrics-port", str(port))
    done = {job.pk for job in ok} | {broken.pk}
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=done, status__in=["succeeded", "dead_lettered"]).count()
            == len(done)
        ),
        timeout=60,
    )
    found = wait_until(lambda: reachable(port) and scrape(port), timeout=10)
    assert outcomes(found, "example.record", "succeeded") == 5
    broken_row = Job.objects.get(pk=broken.pk)
    assert broken_row.status == JobStatus.DEAD_LETTERED
    assert outcomes(found, "demo.broken", "dead_lettered") == 1
    assert outcomes(found, "demo.broken", "failed") == broken_row.attempts_used - 1
    run = ("django_jobs_run_seconds_count", (("job", "example.record"), ("queue", "default")))
    assert found[run] == 5
    assert found[("django_jobs_leases_lost_total", ())] == 0
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(30) == 0, runjobs_process.log(process)
    assert not reachable(port)  # served only while the worker runs
    assert f"metrics served at http://127.0.0.1:{port}/metrics" in runjobs_process.log(process)


def test_processes_2_serve_one_sum_of_their_children(runjobs_process):
    port = free_port()
    jobs = schedule_jobs([{"job": "example.record", "payload": {"n": n}} for n in range(40)])
    process = runjobs_process.start(
        "--processes", "2", "--queue", "default", "--metrics-port", str(port)
    )
    try:
        wait_until(
            lambda: (
                Job.objects.filter(pk__in=[j.pk for j in jobs], status="succeeded").count() == 40
            ),
            timeout=60,
        )
        found = wait_until(
            lambda: (
                reachable(port)
                and outcomes(scrape(port), "example.record", "succeeded") == 40
                and scrape(port)
            ),
            timeout=10,
        )
        assert found
        log = runjobs_process.log(process)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(60) == 0, runjobs_process.log(process)
    assert not reachable(port)
    assert "metrics served at" in log


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--metrics-port", "0"), "--metrics-port must be a port from 1 to 65535, got 0."),
        (("--metrics-port", "9999", "--reload"), "--metrics-port and --reload do not go"),
    ],
)
def test_bad_metrics_options_are_refused(runjobs_process, args, error):
    process = runjobs_process.start("--queue", "default", *args)
    assert process.wait(30) != 0
    assert error in runjobs_process.log(process)


def test_a_port_in_use_is_refused_with_the_reason(runjobs_process):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = runjobs_process.start("--queue", "default", "--metrics-port", str(port))
        assert process.wait(30) != 0
    assert f"could not serve the metrics on 127.0.0.1:{port}" in runjobs_process.log(process)
