"""JobsBackend in a project without "django_jobs" in INSTALLED_APPS: the check says so."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytest.importorskip("django_jobs.backend", reason="needs django.tasks or the django-tasks backport")

SETTINGS = """
{framework}
SECRET_KEY = "not-secret"
USE_TZ = True
INSTALLED_APPS = {apps!r}
DATABASES = {{}}
TASKS = {{"default": {{"BACKEND": "django_jobs.backend.JobsBackend"}}}}
"""


ENQUEUE = """
import django
django.setup()
from django_jobs.tasks.framework import task

@task()
def ping() -> None:
    pass

try:
    ping.enqueue()
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def project_without_django_jobs(tmp_path: Path) -> dict[str, str]:
    """The environment of a project whose TASKS names JobsBackend, without the app."""
    # The backport's check is registered by its app; Django 6's as django.tasks is imported
    # (by a project's tasks modules, its views: here, the settings).
    if find_spec("django.tasks"):
        apps, framework = [], "import django.tasks"
    else:
        apps, framework = ["django_tasks"], ""
    (tmp_path / "no_jobs_settings.py").write_text(SETTINGS.format(apps=apps, framework=framework))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "no_jobs_settings",
    }
    env.pop("DATABASE_URL", None)
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_tasks_backend_enqueue_without_django_jobs_installed_says_so(tmp_path: Path):
    done = run(["-c", ENQUEUE], project_without_django_jobs(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "ImproperlyConfigured TASKS['default'] is a JobsBackend, but 'django_jobs' is not in "
        "INSTALLED_APPS: its tasks cannot be enqueued or run. Add 'django_jobs' to "
        "INSTALLED_APPS and run `manage.py migrate`, or use another task backend."
    )


def test_tasks_backend_check_reports_django_jobs_missing_from_installed_apps(tmp_path: Path):
    done = run(["-m", "django", "check"], project_without_django_jobs(tmp_path), tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "RuntimeError" not in output and "Traceback" not in output, output
    assert (
        "(django_jobs.E031) TASKS['default'] is a JobsBackend, but 'django_jobs' is not in "
        "INSTALLED_APPS: its tasks cannot be enqueued or run." in output
    ), output
    assert "HINT: Add 'django_jobs' to INSTALLED_APPS and run `manage.py migrate`" in output
