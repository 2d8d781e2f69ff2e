"""Workflows under kill -9: real ``runjobs`` processes killed at random while some two
thousand jobs in chains and batches run.

Three workers run 20 chains of 25 steps, a job that waits for the chains' last steps, and
5 batches of 300 members (the first of each group of ten waiting for a step of a chain, the
others for the first of their group) with two callbacks each. Every 0.3 to 1 s one worker
is killed with SIGKILL, in turn the leader, one running the last members of a batch, one
running a job that others wait for, and any; a fresh one starts in its place. Then one
runs on alone, and every job must end: each succeeded exactly once, none ran before what
it waits for had succeeded, each batch's callbacks were enqueued once.

Delivery stays at least once (a kill between a handler's end and its written outcome
runs that attempt again): what holds is one *succeeded* attempt per job. The randomness
is seeded; the seed is printed, and ``JOBS_TEST_CRASH_SEED`` gives it again (the kills
fall at the same intervals, on whatever the workers are doing then).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from itertools import cycle

import pytest
from django.db import connection
from django.db.models import Max, Min

from django_jobs import batch, chain, schedule_job, schedule_jobs
from django_jobs.db import get_driver
from django_jobs.maintenance.rescuer import UNFOLLOWED_SECONDS
from django_jobs.models import Attempt, Batch, Job, JobDependency, JobStatus
from django_jobs.scheduling import JobSpec
from tests.conftest import RunjobsProcesses, wait_until
from tests.support.leaders import leader, pid_of

pytestmark = pytest.mark.django_db(transaction=True)

STEP = "tests.flow_mark"  # fails if it runs before a job it waits for has succeeded
CHAINS, CHAIN_LENGTH = 20, 25
BATCHES, MEMBERS, GROUP = 5, 300, 10
CALLBACKS = ("on_finish", "on_success")
WORKERS = 3
KILLING_SECONDS = 12.0
LEASE_SECONDS = 1.5
LEADER_LEASE_SECONDS = 3.0  # the runjobs_process fixture's
ENV = {
    "JOBS_EXAMPLE_JOB_MODULES": "tests.support.jobs",  # the workers know tests.flow_mark
    "JOBS_LEASE_SECONDS": str(LEASE_SECONDS),
}
#: The longest what is left may stay the same once one worker runs on alone: it leads
#: within a leader lease, takes back the killed workers' leases, and takes the steps of the
#: ends a kill left untaken once they are old enough; with a leader lease to spare.
STALL_SECONDS = 2 * LEADER_LEASE_SECONDS + LEASE_SECONDS + UNFOLLOWED_SECONDS + 2.0
#: How far a job's first start may read before the end of a job it waits for. Both are
#: workers' readings of the database's clock, each off by up to half the round trip its
#: process measured the clock with, and a claim's is read before its statement runs.
CLOCK_SLACK = timedelta(seconds=0.25)
UNENDED = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)


@dataclass
class Workflow:
    chains: list[list[Job]]
    join: Job
    members: dict[int, list[Job]]  # batch id -> its members

    @property
    def jobs(self) -> int:
        callbacks = len(self.members) * len(CALLBACKS)
        members = sum(map(len, self.members.values()))
        return sum(map(len, self.chains)) + 1 + members + callbacks


def enqueue() -> Workflow:
    chains = [
        chain(*[JobSpec(STEP, [n, step]) for step in range(CHAIN_LENGTH)]) for n in range(CHAINS)
    ]
    join = schedule_job(STEP, "join", depends_on=[steps[-1] for steps in chains])
    members: dict[int, list[Job]] = {}
    for n in range(BATCHES):
        callbacks = {kind: (STEP, kind) for kind in CALLBACKS}
        with batch(**callbacks, name=f"fan-out {n}") as b:
            members[b.pk] = schedule_jobs(member_specs(n, chains[n][CHAIN_LENGTH // 2]))
    return Workflow(chains, join, members)


def member_specs(n: int, step: Job) -> list[JobSpec]:
    """A batch's members in groups: the first of each waits for ``step`` (of a chain), the
    others for the first of their group."""
    specs = [JobSpec(STEP, [n, m]) for m in range(MEMBERS)]
    for m, spec in enumerate(specs):
        head = specs[m - m % GROUP]
        specs[m] = replace(spec, depends_on=(head,) if spec is not head else (step,))
    return specs


def poll(find: Callable[[], set[int]], seconds: float) -> set[int]:
    """What ``find`` returns once it returns something, or nothing after ``seconds``."""
    try:
        return wait_until(find, timeout=seconds, interval=0.01)
    except AssertionError:
        return set()


@dataclass
class Killer:
    """Kills a worker at a time, by the role it holds; starts a fresh one in its place."""

    runjobs: RunjobsProcesses
    rng: random.Random
    live: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: Counter[str] = field(default_factory=Counter)

    def start(self) -> None:
        self.live.append(self.runjobs.start("--queue", "default", env=ENV))

    def kill_one(self, role: str) -> None:
        processes = {process.pid: process for process in self.live}
        found = poll(lambda: self.pids_in(role) & set(processes), seconds=0.5)
        pid = self.rng.choice(sorted(found or processes))
        self.killed[role if found else "any"] += 1
        os.kill(pid, signal.SIGKILL)
        processes[pid].wait(10)
        self.live.remove(processes[pid])

    def pids_in(self, role: str) -> set[int]:
        if role == "leader":
            row = leader()
            return {pid_of(row.owner)} if row is not None and row.owner else set()
        running = Job.objects.filter(status=JobStatus.RUNNING, lease_owner__isnull=False)
        if role == "batch end":  # the last members of a batch, all running
            running = running.filter(batch__in=self.batches_ending())
        elif role == "dependency":  # jobs others wait for
            running = running.filter(dependent_links__job__status=JobStatus.WAITING)
        return {pid_of(owner) for owner in running.values_list("lease_owner", flat=True)}

    def batches_ending(self) -> set[int]:
        """The open batches whose members left to end are all running."""
        open_members = Job.objects.filter(batch__finished_at__isnull=True, status__in=UNENDED)
        left = Counter(open_members.values_list("batch", "status"))
        return {b for b, status in left if status == JobStatus.RUNNING} - {
            b for b, status in left if status != JobStatus.RUNNING
        }


def left() -> tuple[int, int, int]:
    """What is left: jobs not ended, ends whose steps are untaken, batches not finished.

    Read in one statement, so from one snapshot: the steps of a batch's last end enqueue
    its callbacks, take off the end's mark and finish the batch at once, and three reads
    apart could count the jobs before those steps and the rest after, finding nothing
    left while the callbacks wait to run."""
    qn = connection.ops.quote_name
    jobs, batches = qn(Job._meta.db_table), qn(Batch._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT COUNT(*) FROM {jobs} WHERE {qn('status')} IN (%s, %s, %s)),"
            f" (SELECT COUNT(*) FROM {jobs} WHERE {qn('workflow_pending')} = %s),"
            f" (SELECT COUNT(*) FROM {batches} WHERE {qn('finished_at')} IS NULL)",
            [*UNENDED, True],
        )
        unended, unfollowed, unfinished = cursor.fetchone()
    return unended, unfollowed, unfinished


def wait_for_the_end(runjobs: RunjobsProcesses, survivor: subprocess.Popen[bytes]) -> None:
    """Until nothing is left; failing if what is left stays the same for STALL_SECONDS."""
    last, moved_at = left(), time.monotonic()
    while any(last):
        time.sleep(0.2)
        now = left()
        if now != last:
            last, moved_at = now, time.monotonic()
        elif time.monotonic() - moved_at > STALL_SECONDS:
            log = runjobs.log(survivor)[-3000:]
            raise AssertionError(f"stuck at {now} (unended, unfollowed, open batches)\n{log}")


def test_a_workflow_survives_workers_killed_at_random(runjobs_process):
    seed = int(os.environ.get("JOBS_TEST_CRASH_SEED") or random.randrange(2**32))
    print(f"seed {seed} (JOBS_TEST_CRASH_SEED={seed} gives it again)")
    rng = random.Random(seed)
    workflow = enqueue()
    killer = Killer(runjobs_process, rng)
    for _ in range(WORKERS):
        killer.start()
    wait_until(lambda: Attempt.objects.exists(), timeout=40)
    roles = cycle(["leader", "batch end", "dependency", "any"])
    stop_at = time.monotonic() + KILLING_SECONDS
    while time.monotonic() < stop_at and any(left()):
        time.sleep(rng.uniform(0.3, 1.0))
        killer.kill_one(next(roles))
        killer.start()
    print(f"killed {dict(killer.killed)}; left {left()}")
    survivor, *others = killer.live  # the oldest runs on alone
    for process in others:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    wait_for_the_end(runjobs_process, survivor)
    print("attempts:", dict(Counter(Attempt.objects.values_list("outcome", flat=True))))
    assert_each_job_succeeded_once(workflow)
    assert_none_started_before_what_it_waits_for()
    assert_each_batch_finished_with_its_callbacks_once(workflow)


def assert_each_job_succeeded_once(workflow: Workflow) -> None:
    statuses = Counter(Job.objects.values_list("status", flat=True))
    assert statuses == {JobStatus.SUCCEEDED: workflow.jobs}
    succeeded = Counter(Attempt.objects.filter(outcome="succeeded").values_list("job", flat=True))
    assert len(succeeded) == workflow.jobs
    assert set(succeeded.values()) == {1}


def assert_none_started_before_what_it_waits_for() -> None:
    """Every handler that ran to its end found the results of what it waits for (each
    checks, and fails if not); and, where a claim does not queue for one database-wide
    write lock, each job's first attempt started after what it waits for ended, on the
    database's clock. Under SQLite's one writer, a claim's time, read before it waits for
    the lock, can precede its rows' release by more than a second on a busy machine."""
    failed = Attempt.objects.exclude(outcome__in=["succeeded", "lease_expired"])
    assert not failed.exists(), list(failed.values_list("job", "number", "outcome", "error"))
    if not get_driver().supports_skip_locked:
        return
    started = Attempt.objects.values("job").annotate(first=Min("started_at"))
    first_start = dict(started.values_list("job", "first"))
    finished = dict(Job.objects.values_list("id", "finished_at"))
    for job, dependency in JobDependency.objects.values_list("job", "depends_on"):
        assert first_start[job] >= finished[dependency] - CLOCK_SLACK, attempts_of(job, dependency)


def attempts_of(*jobs: int) -> str:
    """The attempts of ``jobs``, each with its owner and times, and the jobs' ends: what a
    failure of the order above needs to be read."""
    lines = [
        f"job {pk}: {status}, finished {finished}"
        for pk, status, finished in Job.objects.filter(pk__in=jobs).values_list(
            "id", "status", "finished_at"
        )
    ]
    attempts = Attempt.objects.filter(job__in=jobs).order_by("job", "number")
    lines += [
        f"  job {job} attempt {number} by {owner}: {started} -> {ended} {outcome}"
        for job, number, owner, started, ended, outcome in attempts.values_list(
            "job", "number", "owner", "started_at", "finished_at", "outcome"
        )
    ]
    return "\n".join(lines)


def assert_each_batch_finished_with_its_callbacks_once(workflow: Workflow) -> None:
    for b in Batch.objects.all():
        assert (b.total, b.succeeded, b.dead_lettered, b.cancelled) == (MEMBERS, MEMBERS, 0, 0)
        members = Job.objects.filter(id__in=[job.pk for job in workflow.members[b.pk]])
        callbacks = Job.objects.filter(batch=b).exclude(id__in=members)
        assert sorted(callbacks.values_list("payload", flat=True)) == sorted(CALLBACKS)
        assert b.callback_jobs == {job.payload: job.pk for job in callbacks}
        assert b.finished_at >= members.aggregate(last=Max("finished_at"))["last"]
        # A callback is due once its batch has finished: no claim takes it before.
        starts = Attempt.objects.filter(job__in=callbacks).aggregate(first=Min("started_at"))
        assert starts["first"] >= b.finished_at
