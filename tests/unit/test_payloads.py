import json
import math
from datetime import datetime, timezone

import pytest
from django.test import override_settings

from django_jobs import PayloadError
from django_jobs.payloads import MAX_DEPTH, decode_payload, encode_payload


@pytest.mark.parametrize(
    "payload",
    [None, True, 3, 2.5, "text", [1, "a", None], {"a": {"b": [1, 2]}}, {"unicode": "é✓"}],
)
def test_encode_payload_accepts_any_json_value(payload):
    assert decode_payload(encode_payload(payload)) == payload


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (float("nan"), "payload is nan, not strict JSON"),
        ({"x": math.inf}, r"payload\['x'\] is inf, not strict JSON"),
        ({"x": -math.inf}, r"payload\['x'\] is -inf, not strict JSON"),
        ({"when": object()}, r"payload\['when'\] is an object, not JSON"),
        ({1: "int key"}, "payload has a key that is not a string: 1"),
        ({"s": "nul\x00byte"}, r"payload\['s'\] contains a NUL character"),
        ({"nul\x00key": 1}, r"payload has a key 'nul\\x00key' that contains a NUL character"),
        (["deep", {"list": ["\x00"]}], r"payload\[1\]\['list'\]\[0\] contains a NUL"),
        ({1, 2}, "payload is a set, not JSON"),
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


def test_encode_payload_names_the_path_of_a_value_that_is_not_json():
    payload = {"order": {"id": 7, "items": [1, 2, datetime(2026, 1, 5, tzinfo=timezone.utc)]}}
    with pytest.raises(PayloadError) as excinfo:
        encode_payload(payload)
    assert str(excinfo.value) == "payload['order']['items'][2] is a datetime, not JSON"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"name": "lone \udc80 surrogate"}, "payload['name'] contains a lone surrogate"),
        ({"a": [{"b": "\ud800"}]}, "payload['a'][0]['b'] contains a lone surrogate"),
        (
            {"a": {"key \udfff": 1}},
            "payload['a'] has a key 'key \\udfff' that contains a lone surrogate",
        ),
    ],
)
def test_encode_payload_refuses_lone_surrogates_naming_where(payload, message):
    with pytest.raises(PayloadError) as excinfo:
        encode_payload(payload)
    assert str(excinfo.value).startswith(message)


def test_encode_payload_accepts_characters_outside_the_basic_plane():
    assert decode_payload(encode_payload({"emoji": "\U0001f600"})) == {"emoji": "\U0001f600"}


def nested(depth: int) -> list:
    payload: list = []
    for _ in range(depth - 1):
        payload = [payload]
    return payload


def test_encode_payload_refuses_deep_nesting_without_recursion():
    with pytest.raises(PayloadError, match=f"nested more than {MAX_DEPTH} levels deep"):
        encode_payload(nested(10_000))
    with pytest.raises(PayloadError, match="nested more than"):
        encode_payload({"a": nested(MAX_DEPTH)})
    assert decode_payload(encode_payload(nested(MAX_DEPTH))) == nested(MAX_DEPTH)


def test_encode_payload_refuses_a_circular_reference_naming_where():
    loop: dict = {"items": []}
    loop["items"].append(loop)
    with pytest.raises(PayloadError, match=r"payload\['items'\]\[0\] is a circular reference"):
        encode_payload(loop)
    shared = [1, 2]
    assert decode_payload(encode_payload({"a": shared, "b": shared})) == {"a": [1, 2], "b": [1, 2]}


def test_decode_payload_returns_a_new_value_each_time():
    stored = {"card_token": "tok_1", "items": [1]}
    decoded = decode_payload(stored)  # as a driver that decodes JSON returns it
    decoded.pop("card_token")
    decoded["items"].append(2)
    assert stored == {"card_token": "tok_1", "items": [1]}
    assert decode_payload(stored) == stored


def test_encoded_takes_the_quick_path_only_where_the_walk_would_agree():
    from django_jobs.payloads import encoded

    assert encoded({"a": (1, 2)}) == ('{"a":[1,2]}', {"a": [1, 2]})  # a tuple: a list
    assert encoded({"smile": "\U0001f600"})[1] == {"smile": "\U0001f600"}  # a surrogate pair
    with pytest.raises(PayloadError, match=r"payload has a key that is not a string: 1"):
        encoded({1: "one"})  # the encoder would have written the key as "1"
    with pytest.raises(PayloadError, match=r"payload\['k'\] contains a NUL"):
        encoded({"k": "a\x00b"})
    with pytest.raises(PayloadError, match="lone surrogate"):
        encoded(["\ud800"])
    with pytest.raises(PayloadError, match=r"payload\[0\] is nan"):
        encoded([float("nan")])


def test_encoded_gives_a_flat_dict_back_as_its_text_decodes_without_decoding_it():
    """A dict of string keys to scalars is not decoded to be compared: what it gives back
    is still an equal dict of its own, and whatever else is decoded (or refused) as ever."""
    import enum

    from django_jobs.payloads import encoded

    class Level(enum.IntEnum):
        HIGH = 2

    flat = {"n": 1, "x": 2.5, "s": "é", "b": True, "none": None, "big": 10**30}
    text, decoded = encoded(flat)
    assert decoded == flat and decoded is not flat and text.startswith('{"n":1,')
    assert encoded({"level": Level.HIGH})[1] == {"level": 2}  # decoded: an int, not the enum
    assert type(encoded({"level": Level.HIGH})[1]["level"]) is int
    assert encoded({"k": (1,)})[1] == {"k": [1]}
    with pytest.raises(PayloadError, match=r"payload\['k'\] contains a NUL"):
        encoded({"k": "\x00"})
    with pytest.raises(PayloadError, match="lone surrogate"):
        encoded({"k": "\udfff"})


def _circular() -> list:
    found: list = []
    found.append(found)
    return found


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "payload",
    [
        {"n": 1, "f": 0.1, "big": 10**30, "neg": -2.5e-300, "t": True, "z": None},
        {"s": 'é\x00\n\t"\\ 😀 \ud800', 2: "int key", None: "none key", 1.5: "float key"},
        ["text", (1, 2), [], {}, {"a": {"b": [1, {"c": "d"}]}}],
        "text",
        7,
        float("nan"),
        [float("inf")],
        {"k": object()},
        {("tuple", "key"): 1},
        _circular(),
        _nested(5000),
    ],
    ids=lambda payload: type(payload).__name__,
)
def test_the_payloads_encoder_writes_what_json_dumps_writes(payload):
    """Compact, strict JSON as ``json.dumps`` writes it; None where it refuses the payload."""
    from django_jobs.payloads import _dumps

    try:
        expected = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        expected = None
    assert _dumps(payload) == expected


def test_the_payloads_encoder_is_one_c_encoder_made_once_where_python_has_one():
    """Otherwise the test above tries only the usual encoder."""
    import json.encoder
    from functools import partial

    from django_jobs.payloads import _encode

    if json.encoder.c_make_encoder is None:
        pytest.skip("this Python has no C encoder")
    assert isinstance(_encode, partial)
