"""What pyproject.toml claims: every classifier is one PyPI knows, and the Django and Python
versions named are those CI runs. Each of CI's virtualenvs (scripts/test) runs this with its
own versions, so one that CI runs and the classifiers do not name fails here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import django
import tomllib
from trove_classifiers import classifiers as known_classifiers

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
CLASSIFIERS = PROJECT["classifiers"]


def test_every_classifier_is_one_pypi_accepts():
    assert [c for c in CLASSIFIERS if c not in known_classifiers] == []


def test_classifiers_name_the_django_this_runs_on():
    assert f"Framework :: Django :: {django.VERSION[0]}.{django.VERSION[1]}" in CLASSIFIERS


def test_classifiers_name_the_python_this_runs_on():
    assert f"Programming Language :: Python :: 3.{sys.version_info.minor}" in CLASSIFIERS


def test_oldest_python_admitted_is_one_the_classifiers_name():
    # requires-python admits no Python older than those CI runs (3.10 lacks datetime.UTC).
    [minor] = re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"]).groups()
    assert f"Programming Language :: Python :: 3.{minor}" in CLASSIFIERS
    assert sys.version_info >= (3, int(minor))


def test_readme_names_the_django_versions_the_classifiers_name():
    """The README's status line says which Django versions run: exactly those CI runs."""
    [status] = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("Status:")
    ]
    named = set(re.findall(r"Django (\d+\.\d+)(?: LTS)? and (\d+\.\d+)", status)[0])
    classified = {
        c.rsplit(" ", 1)[1] for c in CLASSIFIERS if c.startswith("Framework :: Django ::")
    }
    assert named == classified
