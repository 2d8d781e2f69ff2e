import math

import pytest
from django.test import override_settings

from django_jobs import PayloadError
from django_jobs.payloads import decode_payload, encode_payload


@pytest.mark.parametrize(
    "payload",
    [None, True, 3, 2.5, "text", [1, "a", None], {"a": {"b": [1, 2]}}, {"unicode": "é✓"}],
)
def test_encode_payload_accepts_any_json_value(payload):
    assert decode_payload(encode_payload(payload)) == payload


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (float("nan"), "not strict JSON"),
        ({"x": math.inf}, "not strict JSON"),
        ({"x": -math.inf}, "not strict JSON"),
        ({"when": object()}, "not JSON serializable"),
        ({1: "int key"}, "not a string"),
        ({"s": "nul\x00byte"}, "NUL"),
        ({"nul\x00key": 1}, "NUL"),
        (["deep", {"list": ["\x00"]}], "NUL"),
        ({1, 2}, "not JSON serializable"),
    ],
)
def test_encode_payload_refuses_what_is_not_strict_json(payload, message):
    with pytest.raises(PayloadError, match=message):
        encode_payload(payload)


def test_encode_payload_escaped_backslash_u0000_text_is_fine():
    assert decode_payload(encode_payload("\\u0000")) == "\\u0000"


@override_settings(DJANGO_JOBS={"MAX_PAYLOAD_BYTES": 100})
def test_encode_payload_refuses_oversized_payloads():
    encode_payload("x" * 90)
    with pytest.raises(PayloadError, match="over MAX_PAYLOAD_BYTES"):
        encode_payload("x" * 100)
    with pytest.raises(PayloadError, match="bytes"):
        encode_payload("é" * 60)  # 120 bytes in UTF-8, 60 characters


def test_decode_payload_refuses_text_that_is_not_json():
    with pytest.raises(PayloadError, match="not valid JSON"):
        decode_payload("{not json")
