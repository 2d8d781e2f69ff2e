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


def test_tasks_backend_check_reports_django_jobs_missing_from_installed_apps(tmp_path: Path):
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
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "RuntimeError" not in output and "Traceback" not in output, output
    assert (
        "(django_jobs.E031) TASKS['default'] is a JobsBackend, but 'django_jobs' is not in "
        "INSTALLED_APPS: its tasks cannot be enqueued or run." in output
    ), output
    assert "HINT: Add 'django_jobs' to INSTALLED_APPS and run `manage.py migrate`" in output
