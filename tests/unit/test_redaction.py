from django_jobs.redaction import redact


def test_redact_masks_long_values_wherever_they_stand():
    payload = {"card": "4111111111111111", "user": {"email": "ada@example.com"}, "n": 123456}
    text = "declined 4111111111111111 for ada@example.com (ref 123456-x)"
    assert redact(text, payload) == "declined *** for *** (ref ***-x)"


def test_redact_masks_short_values_only_as_whole_words():
    payload = {"pin": "123", "flag": "on", "tries": 7}
    text = "pin 123 rejected: 1234 is not 123; turned on in bonus mode after 7 tries (17)"
    assert redact(text, payload) == (
        "pin *** rejected: 1234 is not ***; turned *** in bonus mode after *** tries (17)"
    )


def test_redact_keeps_keys_and_ignores_booleans_and_null():
    payload = {"password": "hunter22", "admin": True, "note": None}
    assert redact("KeyError: 'password' hunter22 True", payload) == "KeyError: 'password' *** True"


def test_redact_masks_values_as_repr_shows_them():
    payload = ["line one\nline two"]
    assert redact("ValueError: 'line one\\nline two'", payload) == "ValueError: '***'"


def test_redact_lists_and_nothing_to_mask():
    assert redact("boom 42", [42]) == "boom ***"
    assert redact("boom", None) == "boom"
