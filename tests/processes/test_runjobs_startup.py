"""``runjobs`` on a database that ``migrate`` has not set up: one line, no traceback."""

import pytest

from tests.conftest import ROOT, manage

pytestmark = pytest.mark.django_db(transaction=True)

QUICK = {"JOBS_POLL_SECONDS": "0.05"}  # the burst polls quickly


def test_runjobs_before_migrate_says_to_migrate_in_one_line(fresh_database_url):
    result = manage("runjobs", "--burst", url=fresh_database_url, **QUICK)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "CommandError: Database 'default' has no django_jobs tables: "
        "run `python manage.py migrate` first."
    ]


def test_runjobs_after_a_partial_migrate_names_the_missing_migrations(fresh_database_url):
    migrate = manage(
        "migrate",
        "django_jobs",
        "0002",
        "-v",
        "0",
        url=fresh_database_url,
        **QUICK,
    )
    assert migrate.returncode == 0, migrate.stderr
    result = manage("runjobs", "--burst", url=fresh_database_url, **QUICK)
    assert result.returncode == 1
    missing = sorted(
        path.stem
        for path in (ROOT / "django_jobs" / "migrations").glob("0*.py")
        if path.stem[:4] > "0002"
    )
    assert result.stderr.splitlines() == [
        f"CommandError: Database 'default' lacks django_jobs migration(s) "
        f"{', '.join(missing)}: run `python manage.py migrate` first."
    ]
    assert "Traceback" not in result.stdout + result.stderr
    migrate = manage("migrate", "-v", "0", url=fresh_database_url, **QUICK)
    assert migrate.returncode == 0, migrate.stderr
    assert (
        manage(
            "runjobs", "--burst", "-v", "0", url=fresh_database_url, JOBS_POLL_SECONDS="0.05"
        ).returncode
        == 0
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            'DJANGO_JOBS = {**DJANGO_JOBS, "LEASE_SECONDS": float("inf")}',
            "(django_jobs.E003) DJANGO_JOBS['LEASE_SECONDS'] must be a positive finite number, "
            "got inf.",
        ),
        (
            'DJANGO_JOBS = {**DJANGO_JOBS, "LEASE_SECONDS": float("nan")}',
            "(django_jobs.E003) DJANGO_JOBS['LEASE_SECONDS'] must be a positive finite number, "
            "got nan.",
        ),
        (
            'DJANGO_JOBS = {**DJANGO_JOBS, "QUEUES": {"default": {"timeout": "30s"}}}',
            "(django_jobs.E004) DJANGO_JOBS['QUEUES']['default']['timeout'] must be a positive "
            "finite number of seconds or None, got '30s'.",
        ),
        ("USE_TZ = False", "(django_jobs.E010) django-jobs needs USE_TZ = True"),
    ],
    ids=["lease-inf", "lease-nan", "timeout-text", "use-tz-false"],
)
def test_runjobs_refuses_settings_that_would_break_the_worker(
    runjobs_process, tmp_path, override, message
):
    (tmp_path / "bad_settings.py").write_text(f"from testproject.settings import *\n{override}\n")
    env = {"DJANGO_SETTINGS_MODULE": "bad_settings", "PYTHONPATH": str(tmp_path)}
    process = runjobs_process.start("--burst", env=env)
    assert process.wait(60) == 1
    log = runjobs_process.log(process)
    assert message in log
    assert "Traceback" not in log
