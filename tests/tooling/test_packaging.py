"""The release as a user gets it: ``python -m build`` makes an sdist and, from it, a wheel
that carry every file of the package (migrations, templates, py.typed); ``twine check``
passes; and the wheel, installed into a fresh virtualenv, migrates a project and runs a job."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import django
import pytest

from tests.conftest import ROOT

#: A process test: it runs with the process tests (scripts/test).
pytestmark = pytest.mark.processes


NAME = "django_jobs-0.1.0.dev0"

SETTINGS = """\
SECRET_KEY = "packaging"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.messages",
    "django.contrib.sessions",
    "django_jobs",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DJANGO_JOBS = {"QUEUES": {"default": {"workers": 1}}, "POLL_SECONDS": 0.05}
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DATABASE_NAME,
    "OPTIONS": {"transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}}}
"""

JOBS = """
from django_jobs import job


@job("shop.add")
def add(ctx, payload):
    return payload["a"] + payload["b"]
"""

ENQUEUE = """
import django; django.setup()
import django_jobs
from django.template.loader import get_template
from django_jobs import schedule_job

print(django_jobs.__file__)
get_template("admin/django_jobs/dashboard.html")  # the admin's templates are installed
schedule_job("shop.add", {"a": 2, "b": 3})
"""


def run(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(  # noqa: S603
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def tracked(under: str = "") -> list[str]:
    """The files of this repository under ``under``, as git has them."""
    return run("git", "ls-files", "-z", "--", under or ".").split("\0")[:-1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built (the wheel from the sdist) from a copy of the
    repository's tracked files, so that nothing untracked slips in."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("the packaging test builds from git's tracked files: needs git and a checkout")
    source = tmp_path_factory.mktemp("source")
    for name in tracked():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, source)
    return out


def test_wheel_and_sdist_carry_every_file_of_the_package(dist):
    package = set(tracked("django_jobs"))
    assert {"django_jobs/py.typed", "django_jobs/migrations/0001_initial.py"} <= package
    assert any(name.startswith("django_jobs/templates/admin/") for name in package)

    with zipfile.ZipFile(dist / f"{NAME}-py3-none-any.whl") as wheel:
        in_wheel = {name for name in wheel.namelist() if not name.startswith(f"{NAME}.dist-info/")}
        metadata = wheel.read(f"{NAME}.dist-info/METADATA").decode()
    assert sorted(package - in_wheel) == []  # every file of the package
    assert sorted(in_wheel - package) == []  # and nothing else
    with tarfile.open(dist / f"{NAME}.tar.gz") as sdist:
        in_sdist = {name.removeprefix(f"{NAME}/") for name in sdist.getnames()}
    assert sorted((package | {"README.md", "LICENSE", "pyproject.toml"}) - in_sdist) == []
    assert "Requires-Python: >=3.11" in metadata
    assert "Provides-Extra: postgres" in metadata


def test_twine_check_passes(dist):
    out = run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert out.count("PASSED") == 2, out


def test_wheel_installed_in_a_fresh_virtualenv_migrates_and_runs_a_job(dist, tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    # This run's Django, from the index (or pip's cache): the wheel's own requirements.
    run(
        sys.executable, "-m", "pip", "--python", python, "install", "-q",
        "--disable-pip-version-check", dist / f"{NAME}-py3-none-any.whl",
        f"Django=={django.get_version()}",
    )  # fmt: skip
    project = tmp_path / "project"
    (project / "shop").mkdir(parents=True)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "jobs.py").write_text(JOBS)
    database = tmp_path / "jobs.sqlite3"
    (project / "settings.py").write_text(f"DATABASE_NAME = {str(database)!r}\n{SETTINGS}")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(project)}
    env["DJANGO_SETTINGS_MODULE"] = "settings"

    run(python, "-W", "error", "-m", "django", "migrate", "-v", "0", cwd=project, env=env)
    installed = run(python, "-W", "error", "-c", ENQUEUE, cwd=project, env=env)
    assert installed.startswith(str(venv)), installed  # the wheel's code, not this checkout's
    run(python, "-W", "error", "-m", "django", "runjobs", "--burst", cwd=project, env=env)
    with sqlite3.connect(database) as db:
        jobs = db.execute("SELECT name, status, result FROM django_jobs_job").fetchall()
    assert jobs == [("shop.add", "succeeded", "5")]
