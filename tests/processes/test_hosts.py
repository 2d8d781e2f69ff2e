"""Worker hosts that are really apart: each ``runjobs`` in a network namespace of its own,
reaching PostgreSQL over its own veth link (:mod:`tests.support.hosts`).

Each scenario is checked from an execution log, as the other fault tests are: no job
lost, no (job, attempt) twice, no two runs of a job at once. The hosts reach the server
straight: it listens on this machine's end of each link for as long as the module runs.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_jobs import schedule_job, schedule_jobs
from django_jobs.models import Attempt, Job, JobStatus, Leader, RecurringJob, WorkerProcess
from testproject.example.models import Execution
from tests.conftest import PGBOUNCER_DIR, ROOT, RunjobsProcesses, wait_until
from tests.support.hosts import REQUIRED, Hosts, listen_on, unavailable
from tests.support.leaders import pid_of
from tests.support.runs import (
    assert_cancelled_in_time,
    assert_no_overlap,
    lease_lapses_at,
    read_runs,
)

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 3.0  # a beat of 1 s
LEADER_LEASE = 3.0  # the tests' runjobs default


def server(verb: str, directory: str) -> None:
    script = str(ROOT / "scripts" / "pgserver.py")
    subprocess.run([sys.executable, script, verb, directory], check=True, timeout=120)  # noqa: S603


@pytest.fixture(scope="module")
def network(django_db_setup: None, django_db_blocker: Any) -> Iterator[Hosts]:
    """Four hosts, and the test database's server listening on their links."""
    if connection.vendor != "postgresql":
        pytest.skip("hosts apart share one PostgreSQL server (SQLite is one host's file)")
    if PGBOUNCER_DIR:
        pytest.skip("the hosts reach the server straight: the suite's PgBouncer is 127.0.0.1's")
    server_dir = os.environ.get("JOBS_TEST_PG_DIR")
    why = unavailable() or (None if server_dir else "needs the server scripts/test starts")
    if why:
        if REQUIRED:
            pytest.fail(f"JOBS_TEST_NETNS=required, but the hosts cannot be made: {why}")
        pytest.skip(why)
    assert server_dir is not None
    hosts = Hosts(4)
    try:
        with django_db_blocker.unblock():
            connections.close_all()
        listen_on(Path(server_dir), hosts.server_addresses)
        server("stop", server_dir)
        server("start", server_dir)
        yield hosts
    finally:
        with django_db_blocker.unblock():
            connections.close_all()
        listen_on(Path(server_dir), [])
        server("stop", server_dir)
        server("start", server_dir)
        hosts.close()


def url_from(network: Hosts, index: int) -> str:
    """The test database's URL as host ``index`` reaches it: over its link."""
    settings = connection.settings_dict
    user = settings.get("USER") or "postgres"
    where = f"{network[index].server_address}:{settings['PORT']}"
    return f"postgres://{user}@{where}/{settings['NAME']}"


def start_on(
    runjobs: RunjobsProcesses,
    network: Hosts,
    index: int,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``runjobs ARGS`` on host ``index``."""
    environment = {
        "DATABASE_URL": url_from(network, index),
        "JOBS_LEASE_SECONDS": str(LEASE),
        **(env or {}),
    }
    prefix = network.command(index, [])
    return runjobs.start(*(args or ("--queue", "default")), env=environment, prefix=prefix)


def stop(runjobs: RunjobsProcesses, process: subprocess.Popen[bytes]) -> None:
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(30) == 0, runjobs.log(process)


def live_leader() -> Leader | None:
    return Leader.objects.held(timezone.now()).first()


# -- one host cut off mid-job --------------------------------------------------------


def test_hosts_a_host_cut_off_mid_job_stops_its_handler_and_rejoins_recording_nothing(
    runjobs_process: RunjobsProcesses, network: Hosts, tmp_path: Path
) -> None:
    runs_for = 9.0
    log = tmp_path / "events.jsonl"
    payload = {"seconds": runs_for, "then_seconds": 0.5, "log": str(log)}
    job = schedule_job("example.watchful", payload, max_attempts=3)
    cut_off = start_on(runjobs_process, network, 0, "--queue", "default", "--workers", "1")
    wait_until(lambda: 1 in read_runs(log, job.pk), timeout=30)
    assert read_runs(log, job.pk)[1].pid == cut_off.pid

    network.cut(0)
    faulted_at = time.time()
    lapses_at = lease_lapses_at(job)
    other = start_on(runjobs_process, network, 1)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert [run.pid for run in read_runs(log, job.pk).values()] == [cut_off.pid, other.pid]
    assert_cancelled_in_time(log, job, faulted_at, lapses_at, LEASE / 3, runs_for)

    # The link comes back: the host serves on, and what it lost stays as the other wrote it.
    network.heal(0)
    stop(runjobs_process, other)
    later = schedule_job("example.record", {})
    wait_until(lambda: Job.objects.get(pk=later.pk).status == JobStatus.SUCCEEDED, timeout=30)
    assert pid_of(later.attempts.get().owner) == cut_off.pid
    assert list(job.attempts.order_by("number").values_list("number", "outcome", "owner")) == [
        (1, "lease_expired", Attempt.objects.get(job=job, number=1).owner),
        (2, "succeeded", Attempt.objects.get(job=job, number=2).owner),
    ]
    assert pid_of(Attempt.objects.get(job=job, number=2).owner) == other.pid
    stop(runjobs_process, cut_off)


# -- the leader's host cut off -------------------------------------------------------


def test_hosts_the_leaders_host_cut_off_another_host_takes_over_the_schedules(
    runjobs_process: RunjobsProcesses, network: Hosts
) -> None:
    processes = [start_on(runjobs_process, network, index) for index in (0, 1)]
    host_of = {process.pid: index for index, process in enumerate(processes)}
    first = wait_until(lambda: (row := live_leader()) and pid_of(row.owner) in host_of and row)
    leading = host_of[pid_of(first.owner)]

    def fire(name: str) -> None:
        # Due now, then next year: a run across a minute's boundary sees one occurrence.
        RecurringJob.objects.create(
            name=name, cron="0 0 1 1 *", job_name="demo.noop", queue="other",
            next_run_at=timezone.now(),
        )  # fmt: skip

    def fired(name: str) -> int:
        return Job.objects.filter(schedule=name).count()

    fire("before")
    wait_until(lambda: fired("before") == 1, timeout=10)

    network.cut(leading)
    cut_at = time.monotonic()
    second = wait_until(
        lambda: (row := live_leader()) and row.epoch > first.epoch and row, timeout=20
    )
    took = time.monotonic() - cut_at
    assert host_of[pid_of(second.owner)] != leading
    assert took < LEADER_LEASE + 1.5, took  # within a leader lease of its last renewal
    fire("during")
    wait_until(lambda: fired("during") == 1, timeout=10)

    network.heal(leading)
    wait_until(
        lambda: (
            "stops acting as leader" in (log := runjobs_process.log(processes[leading]))
            or "no longer leads" in log
        ),
        timeout=20,
    )
    fire("after")
    wait_until(lambda: fired("after") == 1, timeout=10)
    time.sleep(LEADER_LEASE / 3 + 0.5)  # the healed host tries the lease again, and fails
    row = live_leader()
    assert row is not None and (row.owner, row.epoch) == (second.owner, second.epoch)
    # Every occurrence fired once: none twice, none skipped.
    assert {name: fired(name) for name in ("before", "during", "after")} == {
        "before": 1,
        "during": 1,
        "after": 1,
    }
    for process in processes:
        stop(runjobs_process, process)


# -- a host whose clock runs an hour fast ----------------------------------------------


def faketime_library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


def test_hosts_a_host_an_hour_fast_takes_no_live_lease_and_no_leadership(
    runjobs_process: RunjobsProcesses, network: Hosts, tmp_path: Path
) -> None:
    library = faketime_library()
    if library is None:
        if REQUIRED:
            pytest.fail("JOBS_TEST_NETNS=required, but libfaketime is missing")
        pytest.skip("needs libfaketime (apt-get install libfaketime)")
    on_time = start_on(runjobs_process, network, 0)
    leader = wait_until(lambda: (row := live_leader()) and row)  # the host on time leads
    assert pid_of(leader.owner) == on_time.pid
    fast_clock = {
        "LD_PRELOAD": library,
        "FAKETIME": "+1h",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # timeouts and sleeps stay true
    }
    fast = start_on(runjobs_process, network, 1, env=fast_clock)
    log = tmp_path / "events.jsonl"
    jobs = schedule_jobs(
        [
            {"job": "example.watchful", "payload": {"seconds": 1.5, "log": str(log)}}
            for _ in range(16)
        ]
    )
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == len(ids),
        timeout=60,
    )
    # Nothing changed: each job ran once, on one attempt; the fast host ran some; the
    # lease of the leader stayed with the host on time, in its epoch.
    attempts = list(
        Attempt.objects.filter(job_id__in=ids).values_list("job_id", "outcome", "owner")
    )
    logs = f"{runjobs_process.log(on_time)}\n{runjobs_process.log(fast)}"
    assert sorted((job_id, outcome) for job_id, outcome, _ in attempts) == sorted(
        (job_id, "succeeded") for job_id in ids
    ), logs
    assert {pid_of(owner) for _, _, owner in attempts} == {on_time.pid, fast.pid}
    for job_id in ids:
        assert_no_overlap(read_runs(log, job_id))
    row = live_leader()
    assert row is not None and (row.owner, row.epoch) == (leader.owner, leader.epoch)
    # Its clock is an hour fast; the times it wrote are not.
    finished = Job.objects.filter(pk__in=ids).values_list("finished_at", flat=True)
    assert all(abs(at - timezone.now()) < timedelta(minutes=5) for at in finished)
    for process in (fast, on_time):
        stop(runjobs_process, process)


# -- four hosts of four processes, and a kill -9 every two seconds ---------------------


def test_hosts_four_hosts_drain_through_a_kill_storm_each_job_succeeding_once(
    runjobs_process: RunjobsProcesses, network: Hosts
) -> None:
    rng = random.Random(20261202)
    # About 25 s of draining on two quiet cores: a kill every two seconds lands a dozen
    # times, and a loaded machine still drains it well within the deadline below.
    total = 8_000
    schedule_jobs([{"job": "example.record", "max_attempts": 100}] * total)
    env = {"JOBS_LEASE_SECONDS": "2", "JOBS_MAINTENANCE_SECONDS": "0.2"}
    supervisors = [
        start_on(runjobs_process, network, index, "--queue", "default", "--processes", "4",
                 "--workers", "2", env=env)
        for index in range(len(network))
    ]  # fmt: skip
    ours = {process.pid for process in supervisors}

    def children() -> list[int]:
        rows = WorkerProcess.objects.exclude(supervisor=None).values_list("pid", "supervisor")
        return [pid for pid, supervisor in rows if pid_of(str(supervisor)) in ours]

    killed: list[int] = []
    deadline = time.monotonic() + 140  # below the test's timeout: this says how far it got
    while (succeeded := Job.objects.filter(status=JobStatus.SUCCEEDED).count()) < total:
        assert time.monotonic() < deadline, f"the storm did not drain: {succeeded} of {total}"
        time.sleep(2)
        serving = [pid for pid in children() if pid not in killed]
        if serving:
            victim = rng.choice(serving)
            try:
                os.kill(victim, signal.SIGKILL)  # a child of a supervisor this test started
                killed.append(victim)
            except ProcessLookupError:
                pass
    assert len(killed) >= 3
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total
    assert Attempt.objects.filter(outcome="lease_expired").exists()  # kills landed mid-job
    pairs = list(Attempt.objects.values_list("job_id", "number"))
    assert len(pairs) == len(set(pairs))  # no (job, attempt) twice
    assert Attempt.objects.filter(outcome="succeeded").count() == total  # once each
    runs = defaultdict(list)
    for job_id, started, finished in Execution.objects.values_list(
        "job_id", "started_at", "finished_at"
    ):
        runs[job_id].append((started, finished))
    assert len(runs) == total  # none lost
    for intervals in runs.values():
        intervals.sort()
        for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
            assert end <= start  # no two runs of one job at once
    for process in supervisors:
        stop(runjobs_process, process)
