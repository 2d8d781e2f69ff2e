import pytest
from django.test import override_settings

from django_jobs.checks import check_settings


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("card", "must be a list of regular expressions, got str"),
        (["^card$", "(unclosed"], "'(unclosed' is not a valid regular expression"),
        ([3], "3 is not a non-empty string"),
        ([""], "'' is not a non-empty string"),
    ],
)
def test_check_settings_hidden_payload_keys_must_be_a_list_of_regexes(value, message):
    with override_settings(DJANGO_JOBS={"HIDDEN_PAYLOAD_KEYS": value}):
        [error] = check_settings()
    assert error.id == "django_jobs.E020"
    assert error.msg.startswith("DJANGO_JOBS['HIDDEN_PAYLOAD_KEYS'] ")
    assert message in error.msg


@override_settings(DJANGO_JOBS={"HIDDEN_PAYLOAD_KEYS": ["^card$", "iban|bic"]})
def test_check_settings_hidden_payload_keys_valid_list_passes():
    assert check_settings() == []
