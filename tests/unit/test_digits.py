"""Counts read from text take the ASCII digits 0-9 only.

``str.isdigit()`` is also true of ``"²"`` (which ``int()`` then refuses with a traceback) and
of ``"١٠"`` (which ``int()`` reads as 10): each reader refuses both with its own clear error.
"""

from __future__ import annotations

import argparse

import pytest

from django_jobs.management.arguments import parse_duration
from django_jobs.management.commands.jobs import job_id, positive_int
from django_jobs.management.commands.runjobs import processes_option
from django_jobs.text import is_number_text

NOT_ASCII = ["\u00b2", "\u0661\u0660", "\uff15", "1\u00b2"]  # ², ١٠, full-width 5


@pytest.mark.parametrize(("text", "digits"), [("0", True), ("1234", True), ("", False)])
def test_is_number_text_takes_ascii_digits(text: str, digits: bool) -> None:
    assert is_number_text(text) is digits


@pytest.mark.parametrize("text", NOT_ASCII)
def test_is_number_text_refuses_other_scripts_digits(text: str) -> None:
    assert text.isdigit()
    assert not is_number_text(text)


@pytest.mark.parametrize("text", NOT_ASCII)
def test_command_counts_refuse_other_scripts_digits(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a job id"):
        job_id(text)
    with pytest.raises(argparse.ArgumentTypeError, match="whole number of at least 1"):
        positive_int(text)
    with pytest.raises(argparse.ArgumentTypeError, match="whole number or 'auto'"):
        processes_option(text)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text + "d")


def test_command_counts_still_read_ascii_digits() -> None:
    assert (job_id("12"), job_id(" 12 "), positive_int("3"), processes_option("2")) == (
        12,
        12,
        3,
        2,
    )
    assert parse_duration("10d").days == 10
