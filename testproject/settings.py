"""Settings of the test project. The only module that reads the environment."""

from __future__ import annotations

from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, True),
    JOBS_LEASE_SECONDS=(float, 300.0),
    JOBS_POLL_SECONDS=(float, 1.0),
    JOBS_MAINTENANCE_SECONDS=(float, 15.0),
    JOBS_LEADER_LEASE_SECONDS=(float, 30.0),
    JOBS_RETRY_BASE_SECONDS=(float, 30.0),
    JOBS_WORKERS=(int, 2),
    JOBS_ASYNC_CONCURRENCY=(int, 100),
    JOBS_ASYNC_BLOCKED_SECONDS=(float, 0.5),
    JOBS_SHUTDOWN_GRACE_SECONDS=(float, 20.0),
    JOBS_LISTEN=(bool, True),
    JOBS_GLOBAL_LIMIT=(int, 0),
    JOBS_DEFAULT_GLOBAL_LIMIT=(int, 0),
    JOBS_DEFAULT_RATE_LIMIT=(str, ""),
    JOBS_RETENTION_SECONDS=(float, 0.0),
)

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY", default="testproject-not-secret")  # noqa: S105
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobs",
    "testproject.example.apps.ExampleConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Take SQLite's write lock up front, and wait for it rather than fail.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 30}
    )
    # A journal mode of a test's choosing, set on every connection (without one, django-jobs
    # puts the file in WAL mode at migrate and at runjobs start-up).
    if journal_mode := env("JOBS_SQLITE_JOURNAL_MODE", default=""):
        DATABASES["default"]["OPTIONS"]["init_command"] = f"PRAGMA journal_mode={journal_mode};"
    # Tests use a file, so that runjobs subprocesses see the test database.
    DATABASES["default"]["TEST"] = {
        "NAME": env("TEST_SQLITE_NAME", default=f"{DATABASES['default']['NAME']}-test")
    }

if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # Four-byte UTF-8 (Django's default, 'utf8', is three-byte utf8mb3 on MariaDB).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("charset", "utf8mb4")
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DJANGO_JOBS = {
    "QUEUES": {
        "default": {
            "workers": env("JOBS_WORKERS"),
            "async_concurrency": env("JOBS_ASYNC_CONCURRENCY"),
        },
        "emails": {"workers": 1},
        "keyed": {"workers": 4},  # example.keyed: one job per concurrency key at once
    },
    "LEASE_SECONDS": env("JOBS_LEASE_SECONDS"),
    "POLL_SECONDS": env("JOBS_POLL_SECONDS"),
    "MAINTENANCE_SECONDS": env("JOBS_MAINTENANCE_SECONDS"),
    "LEADER_LEASE_SECONDS": env("JOBS_LEADER_LEASE_SECONDS"),
    "RETRY_BASE_SECONDS": env("JOBS_RETRY_BASE_SECONDS"),
    "SHUTDOWN_GRACE_SECONDS": env("JOBS_SHUTDOWN_GRACE_SECONDS"),
    "LISTEN": env("JOBS_LISTEN"),
    "ASYNC_BLOCKED_SECONDS": env("JOBS_ASYNC_BLOCKED_SECONDS"),
}
# The default queue under limits (the peers bench's limited drains).
if env("JOBS_RETENTION_SECONDS"):  # finished jobs kept that long, then pruned (the soak)
    DJANGO_JOBS["RETENTION"] = {
        status: timedelta(seconds=env("JOBS_RETENTION_SECONDS"))
        for status in ("succeeded", "cancelled", "dead_lettered")
    }
if env("JOBS_DEFAULT_GLOBAL_LIMIT"):
    DJANGO_JOBS["QUEUES"]["default"]["global_limit"] = env("JOBS_DEFAULT_GLOBAL_LIMIT")
if env("JOBS_DEFAULT_RATE_LIMIT"):
    DJANGO_JOBS["QUEUES"]["default"]["rate_limit"] = env("JOBS_DEFAULT_RATE_LIMIT")
if env("JOBS_GLOBAL_LIMIT"):  # a queue "limited": at most that many of its jobs run at once
    DJANGO_JOBS["QUEUES"]["limited"] = {"workers": 4, "global_limit": env("JOBS_GLOBAL_LIMIT")}

# Job modules the example app imports as it is ready, beyond its jobs.py: a runjobs given
# JOBS_EXAMPLE_JOB_MODULES=testproject.next_deploy runs the code of the next deploy.
EXAMPLE_JOB_MODULES = env.list("JOBS_EXAMPLE_JOB_MODULES", default=[])

# Behind PgBouncer in transaction mode (the tests' pooled suite, scripts/pgbouncer.py):
# no server-side cursors nor prepared statements, and LISTEN on a direct connection.
# JOBS_KEEP_PREPARED_STATEMENTS leaves DJANGO_JOBS["PREPARED_STATEMENTS"] at its default,
# as a project that missed the scaling guide's line does.
if env.bool("JOBS_PGBOUNCER", default=False):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    if not env.bool("JOBS_KEEP_PREPARED_STATEMENTS", default=False):
        DJANGO_JOBS["PREPARED_STATEMENTS"] = False
if env.str("LISTEN_DATABASE_URL", default=""):
    DATABASES["listen"] = {**env.db("LISTEN_DATABASE_URL"), "TEST": {"MIRROR": "default"}}
    DJANGO_JOBS["LISTEN_DATABASE"] = "listen"

# Django's Tasks framework run by django-jobs: Django 6's own, or on Django 5.2 the
# django-tasks backport when it is installed. "immediate" runs the same tasks in-process.
TASKS_FRAMEWORK = "django.tasks" if find_spec("django.tasks") else None
if TASKS_FRAMEWORK is None and find_spec("django_tasks"):
    TASKS_FRAMEWORK = "django_tasks"
    INSTALLED_APPS.append("django_tasks")
if TASKS_FRAMEWORK is not None:
    TASKS = {
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default", "emails"],
            # The tests' tasks: `tests` is not an installed app, so its tasks module is listed
            # for `runjobs` to import (an installed app's tasks.py needs no listing).
            "OPTIONS": {"MODULES": ["tests.support.tasks"]},
        },
        "immediate": {
            "BACKEND": f"{TASKS_FRAMEWORK}.backends.immediate.ImmediateBackend",
            "QUEUES": [],
        },
    }
