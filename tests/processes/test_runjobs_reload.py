"""``runjobs --reload``: Django's autoreloader restarts the worker when code changes."""

import os
import signal

import pytest

from django_jobs import schedule_job
from django_jobs.models import Job, JobStatus, WorkerProcess
from testproject.example.models import Execution
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def worker_pids() -> set[int]:
    return set(WorkerProcess.objects.values_list("pid", flat=True))


def touch_until_restarted(module, first: int) -> set[int]:
    """Change ``module`` until a worker other than ``first`` registers. The reloader reads
    the files' times once it has started: a change made before that first reading goes
    unseen, so the test changes the file again (every 3 s) until the worker restarts."""
    for touch in range(1, 6):
        module.write_text(module.read_text() + f"# touched {touch}\n")
        try:
            return wait_until(lambda: worker_pids() - {first}, timeout=3)
        except AssertionError:
            continue
    raise AssertionError("the worker did not restart")


def test_runjobs_reload_restarts_the_worker_when_a_module_changes_and_serves_on(
    runjobs_process, tmp_path
):
    # A settings module of the test's own, which the project imports: the file to touch.
    module = tmp_path / "reload_settings.py"
    module.write_text("from testproject.settings import *  # noqa: F403\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    # DEBUG: Django's console handler, which prints the reloader's line, logs only then.
    env = {"PYTHONPATH": path, "DJANGO_SETTINGS_MODULE": "reload_settings", "DEBUG": "true"}
    watcher = runjobs_process.start("--reload", "--queue", "default", env=env)
    children: set[int] = set()
    try:
        [first] = wait_until(worker_pids, timeout=30)
        children.add(first)
        assert first != watcher.pid  # the worker runs in the watcher's child
        [second] = touch_until_restarted(module, first)
        children.add(second)
        assert worker_pids() == {second}  # the first worker removed its row as it stopped
        assert not alive(first) or wait_until(lambda: not alive(first), timeout=10)
        log = runjobs_process.log(watcher)
        assert log.count("serving queues") == 2, log
        assert "reload_settings.py changed, reloading." in log
        job = schedule_job("example.record")
        wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=20)
        assert list(Execution.objects.values_list("pid", flat=True)) == [second]
        os.kill(second, signal.SIGTERM)  # the worker stops; the watcher exits with its status
        assert watcher.wait(20) == 0, runjobs_process.log(watcher)
        assert worker_pids() == set()
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_runjobs_reload_ctrl_c_lets_the_worker_finish_its_job(runjobs_process, tmp_path):
    mark = tmp_path / "started"
    job = schedule_job("example.record", {"sleep": 1.5, "mark": str(mark)})
    watcher = runjobs_process.start("--reload", "--queue", "default")
    [child] = wait_until(worker_pids, timeout=30)
    try:
        # The handler's own mark, not the row's status: a job claimed but not yet taken by
        # a handler thread is handed back by a graceful stop, unstarted.
        wait_until(mark.exists, timeout=20)
        for pid in (watcher.pid, child):  # as the terminal does: the whole process group
            os.kill(pid, signal.SIGINT)
        assert watcher.wait(20) == 0, runjobs_process.log(watcher)
        wait_until(lambda: not alive(child), timeout=10)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED  # not killed mid-job
    assert worker_pids() == set()


def test_runjobs_reload_refuses_burst(runjobs_process):
    process = runjobs_process.start("--reload", "--burst")
    assert process.wait(20) != 0
    assert "--reload and --burst do not go together" in runjobs_process.log(process)
