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
