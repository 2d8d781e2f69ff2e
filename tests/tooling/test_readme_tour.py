"""The README's install and tour, run as written: its settings, its ``shop/jobs.py`` and
``shop/views.py``, in a project of their own on a fresh SQLite file, with real ``migrate``
and ``runjobs`` processes."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import django
import pytest

from tests.conftest import ROOT
from tests.support.snippets import block_headed, python_blocks

#: A process test: it runs with the process tests (scripts/test).
pytestmark = pytest.mark.processes


README = ROOT / "README.md"
# The README's "..." in INSTALLED_APPS stands for the project's own apps.
PROJECT_APPS = '"django.contrib.auth", "django.contrib.contenttypes", "shop",'
# The job the README's schedule names is the reader's own.
NIGHTLY = '\n\n@job("reports.nightly")\ndef nightly_report(ctx, payload):\n    pass\n'


def readme_settings() -> str:
    """The README's settings: the install block, its SQLite OPTIONS line, the schedules."""
    text = README.read_text(encoding="utf-8")
    [install] = [b for b in python_blocks(README) if b.startswith("INSTALLED_APPS")]
    assert "[...," in install
    [options] = re.findall(r'`(DATABASES\["default"\]\["OPTIONS"\] = [^`]*)`', text)
    [recurring] = [b for b in python_blocks(README) if '"RECURRING"' in b]
    return "\n".join([install.replace("[...,", f"[{PROJECT_APPS}"), options, recurring])


def mail_settings(folder: Path) -> str:
    """Mail written to files in ``folder``; Django 6.1 configures it in MAILERS."""
    backend = "django.core.mail.backends.filebased.EmailBackend"
    if django.VERSION >= (6, 1):
        options = {"file_path": str(folder)}
        return f"MAILERS = {{'default': {{'BACKEND': {backend!r}, 'OPTIONS': {options!r}}}}}"
    return f"EMAIL_BACKEND = {backend!r}\nEMAIL_FILE_PATH = {str(folder)!r}"


def write_tour_project(path: Path) -> None:
    shop = path / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "jobs.py").write_text(block_headed(README, "# shop/jobs.py") + NIGHTLY)
    (shop / "views.py").write_text(block_headed(README, "# shop/views.py"))
    (path / "settings.py").write_text(
        "SECRET_KEY = 'tour'\n"
        "DEFAULT_AUTO_FIELD = 'django.db.models.BigAutoField'\n"
        f"{mail_settings(path / 'mail')}\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', "
        f"'NAME': {str(path / 'tour.sqlite3')!r}}}}}\n" + readme_settings()
    )


def run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-W", "error", *args],
        cwd=path,
        env={**os.environ, "PYTHONPATH": str(path), "DJANGO_SETTINGS_MODULE": "settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


SIGN_UP = """
import django; django.setup()
from django.test import RequestFactory
from shop.views import signup

request = RequestFactory().post("/signup/", {"username": "ada", "email": "ada@example.com"})
response = signup(request)
print(response.status_code, response.content.decode())
"""


def test_readme_tour_runs_as_written(tmp_path):
    write_tour_project(tmp_path)
    run(tmp_path, "-m", "django", "migrate", "-v", "0")
    assert run(tmp_path, "-c", SIGN_UP).stdout == "200 Welcome! Check your mail.\n"
    run(tmp_path, "-m", "django", "runjobs", "--burst")

    with sqlite3.connect(tmp_path / "tour.sqlite3") as db:
        jobs = db.execute("SELECT name, queue, status FROM django_jobs_job").fetchall()
        schedules = db.execute(
            "SELECT name, cron, job_name, timezone, enabled, source FROM django_jobs_recurringjob"
        ).fetchall()
        journal = db.execute("PRAGMA journal_mode").fetchone()
    assert jobs == [("emails.welcome", "emails", "succeeded")]
    assert schedules == [
        ("nightly-report", "0 2 * * *", "reports.nightly", "Europe/Paris", 1, "settings")
    ]
    assert journal == ("wal",)  # the README's OPTIONS line is in force
    [mail] = (tmp_path / "mail").iterdir()
    assert "Subject: Welcome!" in mail.read_text() and "To: ada@example.com" in mail.read_text()
