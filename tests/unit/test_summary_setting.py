"""DJANGO_JOBS["SUMMARY_SECONDS"]: seconds between a worker's summaries, 0 for none."""

import math

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf import settings


def test_summary_seconds_defaults_to_a_minute_and_accepts_0():
    assert settings.SUMMARY_SECONDS == 60
    with override_settings(DJANGO_JOBS={"SUMMARY_SECONDS": 0}):
        assert check_settings() == []
        assert settings.SUMMARY_SECONDS == 0


@pytest.mark.parametrize("value", [-1, "60", None, math.inf, True], ids=repr)
def test_summary_seconds_refuses_what_is_not_seconds_naming_the_key_and_the_fix(value):
    with override_settings(DJANGO_JOBS={"SUMMARY_SECONDS": value}):
        [error] = check_settings()
        with pytest.raises(ImproperlyConfigured, match=r"DJANGO_JOBS\['SUMMARY_SECONDS'\]"):
            settings.validate()
    assert error.msg == (
        f"DJANGO_JOBS['SUMMARY_SECONDS'] must be a non-negative finite number, got {value!r}."
    )
    assert error.hint.startswith("Give seconds, 0 or more, e.g. 60")
    assert error.hint.endswith("; 0: no summary.")
