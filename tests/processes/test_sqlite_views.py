"""A project made by ``django-admin startproject``, default settings, on SQLite: views that
enqueue while two ``runjobs`` processes drain a backlog never fail."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import RunjobsProcesses, wait_until

pytestmark = pytest.mark.journal_modes

REQUESTS = 60
AT_ONCE = 8
BACKLOG = 300
USERS = 1000

JOBS_MODULE = """
import time
from pathlib import Path

from django.contrib.auth.models import User

from django_jobs import job


@job("shop.export")
def export(ctx, payload):
    # A report streamed from a table, as a CSV export is: one read that lasts seconds.
    rows = 0
    for _user in User.objects.order_by("pk").iterator(chunk_size=10):
        if not rows:
            Path(payload["started"]).touch()
        time.sleep(0.01)
        rows += 1
    return rows


@job("shop.receipt")
def receipt(ctx, payload):
    # A handler reads, as most do: a reader that holds up writers without WAL.
    return User.objects.filter(username=str(payload["order"])).exists()
"""

VIEWS_MODULE = """
from django.contrib.auth.models import User
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from django_jobs import schedule_job


@csrf_exempt  # an endpoint other programs post to
def order(request, number):
    User.objects.filter(username=str(number)).exists()  # a view reads, then enqueues
    job = schedule_job("shop.receipt", {"order": number})
    return JsonResponse({"job": job.pk}, status=202)
"""


# The project's own settings, not the test project's that pytest put in the environment.
ENVIRONMENT = {"DJANGO_SETTINGS_MODULE": "mysite.settings"}


def startproject(where: Path) -> Path:
    """A fresh ``startproject`` with ``django_jobs``, an app with a job and a view."""
    where.mkdir()
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(where)],
        env={**os.environ, **ENVIRONMENT},
        check=True,
        timeout=60,
    )
    (where / "shop").mkdir()
    (where / "shop" / "__init__.py").write_text("")
    (where / "shop" / "jobs.py").write_text(JOBS_MODULE)
    (where / "shop" / "views.py").write_text(VIEWS_MODULE)
    with open(where / "mysite" / "settings.py", "a") as settings:
        settings.write('\nINSTALLED_APPS += ["django_jobs", "shop"]\n')
    with open(where / "mysite" / "urls.py", "a") as urls:
        urls.write(
            textwrap.dedent("""
            from shop.views import order

            urlpatterns += [path("order/<int:number>/", order)]
            """)
        )
    return where


def manage(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(project / "manage.py"), *args],
        cwd=project,
        env={**os.environ, **ENVIRONMENT},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def request(url: str) -> int | str:
    """The response's status, or what went wrong."""
    try:
        with urllib.request.urlopen(url, data=b"", timeout=30) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError as exc:
        return repr(exc)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):  # noqa: S310
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def job_counts(database: Path, name: str) -> dict[str, int]:
    """Job ``name``'s rows per status (none while the file is locked)."""
    try:
        with sqlite3.connect(database, timeout=1) as db:
            rows = db.execute(
                "SELECT status, count(*) FROM django_jobs_job WHERE name = ? GROUP BY status",
                [name],
            )
            return dict(rows.fetchall())
    except sqlite3.OperationalError:
        return {}


def seed(project: Path, started: Path) -> None:
    """Users for the export to read, the export (first in line), a backlog of receipts."""
    result = manage(
        project,
        "shell",
        "-c",
        "from django.contrib.auth.models import User;"
        "from django_jobs import schedule_job, schedule_jobs;"
        f"User.objects.bulk_create(User(username=str(n)) for n in range({USERS}));"
        f"schedule_job('shop.export', {{'started': {str(started)!r}}}, priority=10);"
        f"schedule_jobs([{{'job': 'shop.receipt', 'payload': {{'order': 0}}}}] * {BACKLOG})",
    )
    assert result.returncode == 0, result.stderr


def test_startproject_views_enqueue_without_failing_while_two_workers_drain(
    tmp_path: Path, runjobs_process: RunjobsProcesses
) -> None:
    project = startproject(tmp_path / "site")
    database = project / "db.sqlite3"
    migrate = manage(project, "migrate")
    assert migrate.returncode == 0, migrate.stderr
    assert f"  Put the SQLite file {database} (database 'default') in WAL mode" in migrate.stdout
    started = tmp_path / "export-started"
    seed(project, started)
    port = free_port()
    server = runjobs_process.start(
        "--noreload", f"127.0.0.1:{port}", env=ENVIRONMENT, project=project, command="runserver"
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{base}/admin/login/"), timeout=20, interval=0.1)
    workers = [
        runjobs_process.start("--workers", "4", env=ENVIRONMENT, project=project) for _ in range(2)
    ]
    wait_until(started.exists, timeout=20)  # the export reads, the receipts are drained

    with ThreadPoolExecutor(AT_ONCE) as pool:
        statuses = list(pool.map(request, [f"{base}/order/{n}/" for n in range(1, REQUESTS + 1)]))

    failed = [status for status in statuses if status != 202]
    assert failed == [], f"{len(failed)} of {REQUESTS} failed: {runjobs_process.log(server)}"
    wait_until(
        lambda: job_counts(database, "shop.receipt") == {"succeeded": BACKLOG + REQUESTS},
        timeout=30,
        interval=0.1,
    )
    for process in workers:
        log = runjobs_process.log(process)
        assert process.poll() is None, log
        # The default settings' W001 reaches the person starting the worker, once; the
        # file is in WAL mode already, so no W003 and nothing to switch.
        assert log.count("(django_jobs.W001) SQLite transactions") == 1, log
        assert "W003" not in log, log
        assert "WAL mode" not in log, log
    # ... and it is not repeated on every command: runserver does not say it.
    assert "W001" not in runjobs_process.log(server)
