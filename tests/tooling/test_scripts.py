"""The shell scripts' own failure paths, run by bash with a PATH the test controls."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Stands in for a Python 3.11 on PATH: new enough for Django 5.2, too old for Django 6.
PYTHON_311 = """#!/bin/sh
case "$*" in *"(3, 12)"*|*"(3, 13)"*) exit 1 ;; esac
exit 0
"""


@pytest.fixture
def scripts_copy(tmp_path: Path) -> Path:
    """scripts/test and lib.sh in an empty checkout, so nothing real is set up or run."""
    scripts = tmp_path / "checkout" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("test", "lib.sh"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
    return scripts


def test_scripts_test_without_python_312_says_what_is_missing(scripts_copy, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "cat", "sha1sum", "cut", "rm", "mktemp"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "python3").write_text(PYTHON_311)
    (bin_dir / "python3").chmod(0o755)
    home = tmp_path / "home"  # no ~/.pyenv
    home.mkdir()
    result = subprocess.run(
        [str(bin_dir / "bash"), str(scripts_copy / "test")],
        env={"PATH": str(bin_dir), "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "scripts/test: Django 6 needs Python 3.12 or newer, and none was found (tried python3, "
        "python3.13, python3.12, python3.11 on PATH and pyenv's versions). Install one, or test "
        "Django 5.2 only: JOBS_TEST_DJANGO=5.2 bash scripts/test"
    ]
    assert not (scripts_copy.parent / ".venv").exists()


@pytest.mark.parametrize("databases", ["sqlite,mariadb", "mysql"])
def test_scripts_test_refuses_a_database_it_does_not_know(scripts_copy, databases):
    """Else it would run no suite and pass."""
    result = subprocess.run(
        ["bash", str(scripts_copy / "test")],
        env={"PATH": "/usr/bin:/bin", "JOBS_TEST_DATABASES": databases},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"unknown database {databases} (known, space-separated:")
    assert not (scripts_copy.parent / ".venv").exists()


# Stands in for Python 3.12 on PATH (find_python's probe, `--version`) and for the virtualenvs'
# pythons, which record how bench/peers.py was started instead of running it.
FAKE_PYTHON_312 = """#!/bin/sh
case "$1" in --version) echo "Python 3.12.1"; exit 0 ;; -c) exit 0 ;; esac
echo "args: $*" >>"$CALLS"
echo "DATABASE_URL: ${DATABASE_URL-unset}" >>"$CALLS"
"""


@pytest.fixture
def peers_checkout(tmp_path: Path) -> Path:
    """scripts/bench-peers in a checkout whose virtualenvs are fakes, already set up."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("bench-peers", "lib.sh"):
        shutil.copy(ROOT / "scripts" / name, checkout / "scripts" / name)
    (checkout / "pyproject.toml").write_text("[project]\n")
    digest = subprocess.run(
        ["sha1sum"], input=b"[project]\n", capture_output=True, check=True
    ).stdout.decode()[:12]
    stamps = {
        ".venv": f"{digest} Django>=5.2,<5.3",
        "bench/.envs/tasks-db": "Python 3.12.1 Django>=6,<7 django-tasks-db psycopg[binary]",
    }
    for venv, stamp in stamps.items():
        (checkout / venv / "bin").mkdir(parents=True)
        (checkout / venv / "bin" / "python").write_text(FAKE_PYTHON_312)
        (checkout / venv / "bin" / "python").chmod(0o755)
        (checkout / venv / ".stamp").write_text(stamp + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "cat", "sha1sum", "cut", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "python3").symlink_to(checkout / ".venv" / "bin" / "python")
    return checkout


@pytest.mark.parametrize("given", [["--database", "sqlite-wal"], ["--database=sqlite-wal"]])
def test_scripts_bench_peers_on_sqlite_starts_no_server(
    peers_checkout: Path, tmp_path: Path, given: list[str]
) -> None:
    calls = tmp_path / "calls"
    result = subprocess.run(
        [shutil.which("bash") or "bash", str(peers_checkout / "scripts" / "bench-peers")]
        + ["--jobs", "10", *given],
        env={
            "PATH": str(tmp_path / "bin"),
            "HOME": str(tmp_path),
            "CALLS": str(calls),
            "DATABASE_URL": "postgres://bench@127.0.0.1:5432/bench",
        },
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [
        f"args: bench/peers.py --jobs 10 {' '.join(given)}",
        "DATABASE_URL: unset",
    ]
    assert "peers on SQLite" in result.stderr
    assert not (peers_checkout / "bench" / ".envs" / "procrastinate").exists()
