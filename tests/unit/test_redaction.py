import json
import random
import string
import time

import pytest
from django.test import override_settings

from django_jobs.redaction import MASK, mask_payload, redact, secret_values


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API",
        "Authorization",
        "auth_token",
        "client_secret",
        "password",
        "PASSCODE",
        "signature",
        "session_cookie",
        "HTTP_COOKIE",
        "card_token",
        "x-api-key",
    ],
)
def test_redact_masks_the_values_of_keys_django_would_hide(key):
    payload = {key: "s3cr3t-value", "user": "ada"}
    assert redact("login s3cr3t-value for ada", payload) == "login *** for ada"


def test_redact_keeps_ordinary_errors_readable():
    payload = {"file": "orders.csv", "batch": 2, "retries": 3}
    text = "row 2: expected 3 columns, got 2 in orders.csv"
    assert redact(text, payload) == text


def test_redact_finds_secrets_at_any_depth_and_everything_under_a_secret_key():
    payload = {
        "orders": [{"id": 7, "billing": {"card_token": "tok_visa_4242"}}],
        "auth": {"user": "ada", "pin": 1234, "scopes": ["read", "write"]},
    }
    assert secret_values(payload) == {"tok_visa_4242", "ada", "1234", "read", "write"}
    text = "order 7: tok_visa_4242 refused for ada (1234), scopes read, write"
    assert redact(text, payload) == "order 7: *** refused for *** (***), scopes ***, ***"


def test_redact_masks_long_secrets_anywhere_and_short_ones_as_whole_words():
    payload = {"api_key": "abcdef", "pin": 7, "password": "xyz"}
    assert redact("key=abcdef, keyabcdefkey", payload) == "key=***, key***key"
    assert redact("password xyz, xyzzy", payload) == "password ***, xyzzy"
    assert redact("pin 7, row 7", {"pin": 7}) == "pin 7, row 7"  # "pin" is no secret name
    assert redact("pin 7, row 17", {"pin_token": 7}) == "pin ***, row 17"


def test_redact_masks_secrets_as_repr_and_json_show_them():
    payload = {"secret": 'line one\nline "two" é'}
    assert redact("ValueError: 'line one\\nline \"two\" é'", payload) == "ValueError: '***'"
    dumped = json.dumps(payload)
    assert redact(f"sent {dumped}", payload) == 'sent {"secret": "***"}'


def test_redact_masks_overlapping_and_nested_secrets_as_one():
    payload = {"token": ["abcdef", "defghi", "cde"]}
    assert redact("xx abcdefghi xx cde", payload) == "xx *** xx ***"


def test_redact_keeps_keys_booleans_and_null():
    payload = {"password": True, "token": None, "api": False, "key": ["", "  "]}
    assert secret_values(payload) == set()
    assert redact("KeyError: 'password' True None", payload) == "KeyError: 'password' True None"
    assert redact("boom", None) == "boom"
    assert redact("boom 42", [42]) == "boom 42"


@override_settings(DJANGO_JOBS={"HIDDEN_PAYLOAD_KEYS": ["^card$", "iban"]})
def test_redact_hidden_payload_keys_setting_extends_the_pattern():
    payload = {"card": "4111111111111111", "IBAN_number": "DE89370400440532013000", "name": "Ada"}
    text = "card 4111111111111111 / DE89370400440532013000 for Ada"
    assert redact(text, payload) == "card *** / *** for Ada"
    assert redact("4242424242", {"cards": "4242424242"}) == "4242424242"
    assert redact("hunter22", {"password": "hunter22"}) == MASK  # Django's names still count


def test_mask_payload_hides_secret_values_and_keeps_the_rest():
    payload = {"file": "orders.csv", "auth": {"user": "ada"}, "rows": [{"api_key": "k", "n": 1}]}
    assert mask_payload(payload) == {
        "file": "orders.csv",
        "auth": MASK,
        "rows": [{"api_key": MASK, "n": 1}],
    }
    assert payload["auth"] == {"user": "ada"}  # a copy
    assert mask_payload([1, "x", None]) == [1, "x", None]


def test_redact_is_linear_for_a_large_payload_and_message():
    # 10,000 keys, every 20th a secret; masking every value of it took seconds.
    rng = random.Random(4)

    def word() -> str:
        return "".join(rng.choice(string.ascii_letters) for _ in range(14))

    payload = {
        (f"api_key_{n}" if n % 20 == 0 else f"k{n}"): (word() if n % 20 == 0 else n)
        for n in range(10_000)
    }
    assert len(json.dumps(payload)) > 150_000
    values = list(payload.values())
    message = " ".join(str(rng.choice(values)) for _ in range(25_000))[:100_000]
    assert len(message) == 100_000
    started = time.perf_counter()
    masked = redact(message, payload)
    assert time.perf_counter() - started < 1.0
    assert MASK in masked
    assert not secret_values(payload) & set(masked.split())


def test_redact_is_linear_when_secrets_almost_match_everywhere():
    payload = {"token": "a" * 2000 + "b", "secret": ["a" * n + "c" for n in range(1, 200)]}
    message = "a" * 100_000 + "b"
    started = time.perf_counter()
    masked = redact(message, payload)
    assert time.perf_counter() - started < 1.0
    assert masked == "a" * 98_000 + MASK


def test_mask_payload_copes_with_any_depth():
    payload: list = [{"token": "x"}]
    for _ in range(5000):
        payload = [payload]
    masked = mask_payload(payload)
    for _ in range(5000):
        masked = masked[0]
    assert masked == [{"token": MASK}]


def naive_redact(text: str, secrets: set[str]) -> str:
    """Mask each occurrence one by one: slow, obviously right."""
    covered = [False] * len(text)
    for secret in secrets:
        for start in range(len(text) - len(secret) + 1):
            end = start + len(secret)
            if text[start:end] != secret:
                continue
            before = start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_")
            after = end < len(text) and (text[end].isalnum() or text[end] == "_")
            if len(secret) >= 4 or not (before or after):
                covered[start:end] = [True] * len(secret)
    parts, index = [], 0
    while index < len(text):
        if covered[index]:
            while index < len(text) and covered[index]:
                index += 1
            parts.append(MASK)
        else:
            parts.append(text[index])
            index += 1
    return "".join(parts)


def test_redact_agrees_with_a_naive_masking_on_random_texts():
    rng = random.Random(11)
    for _ in range(300):
        secrets = ["".join(rng.choice("ab c") for _ in range(rng.randint(1, 6))) for _ in range(4)]
        text = "".join(rng.choice("ab c_") for _ in range(rng.randint(0, 40)))
        payload = {"token": secrets}
        assert redact(text, payload) == naive_redact(text, secret_values(payload)), (text, secrets)
