"""Payloads are strict JSON: the same payload is refused on every database."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from .conf import settings
from .exceptions import PayloadError
from .text import UNSTORABLE

# Deeper payloads are refused: Python's own JSON decoder gives up near 1,000 levels.
MAX_DEPTH = 100


def _string_problem(text: str) -> str | None:
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "a NUL character (\\u0000)"
    return "a lone surrogate (not valid Unicode)"


def _kind(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def check_payload(payload: Any, what: str = "payload") -> None:
    """Raise :class:`PayloadError` naming the path of the first value that is not strict JSON.

    Walks the payload without recursion, so a deep payload gets an answer
    rather than a ``RecursionError``. ``what`` names the value's root in the message.
    """
    stack: list[tuple[Any, str, int] | int] = [(payload, what, 1)]
    open_containers: set[int] = set()  # the ids of the containers around the value
    while stack:
        entry = stack.pop()
        if isinstance(entry, int):
            open_containers.discard(entry)
            continue
        value, path, depth = entry
        if value is None or isinstance(value, (bool, int)):
            continue
        if isinstance(value, str):
            problem = _string_problem(value)
            if problem:
                raise PayloadError(f"{path} contains {problem}")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise PayloadError(f"{path} is {value!r}, not strict JSON")
        elif isinstance(value, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise PayloadError(f"{path} is nested more than {MAX_DEPTH} levels deep")
            if id(value) in open_containers:
                raise PayloadError(f"{path} is a circular reference to a container around it")
            open_containers.add(id(value))
            stack.append(id(value))
            stack.extend(reversed(_children(value, path, depth + 1)))
        else:
            raise PayloadError(f"{path} is {_kind(value)}, not JSON")


def _children(
    value: dict[Any, Any] | list[Any] | tuple[Any, ...], path: str, depth: int
) -> list[Any]:
    if not isinstance(value, dict):
        return [(item, f"{path}[{index}]", depth) for index, item in enumerate(value)]
    children = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise PayloadError(f"{path} has a key that is not a string: {key!r}")
        problem = _string_problem(key)
        if problem:
            raise PayloadError(f"{path} has a key {key!r} that contains {problem}")
        children.append((item, f"{path}[{key!r}]", depth))
    return children


def encode_payload(payload: Any, what: str = "payload", limit: int | None = None) -> str:
    """Serialise ``payload`` to JSON text, or raise :class:`PayloadError`.

    A handler's return value goes through the same rules (``what`` names it).
    ``limit``: ``MAX_PAYLOAD_BYTES`` as the caller read it (else read here).
    """
    return encoded(payload, what, limit)[0]


def encoded(payload: Any, what: str = "payload", limit: int | None = None) -> tuple[str, Any]:
    """:func:`encode_payload`'s text, and the payload as that text decodes (lists for
    tuples): what a job stores and what its row holds.

    The walk of :func:`check_payload` names the first value at fault, but costs more than
    the encoding itself; most payloads are plain JSON. So the payload is encoded first,
    and walked only when the encoding fails, when its text may hold what the walk refuses
    (:func:`_may_be_refused`), or when the text does not decode to the payload (a key that
    is not a string, which the encoder would turn into one; a tuple): the walk then
    refuses it or lets it pass, as it always did.
    """
    text = _dumps(payload)
    if text is None:
        decoded, differs = None, True
    elif _flat(payload):
        decoded, differs = dict(payload), False  # as its text decodes, found without decoding
    else:
        decoded = json.loads(text)
        differs = decoded != payload
    if text is None or differs or _may_be_refused(text):
        check_payload(payload, what)  # raises, naming the value at fault, or lets it pass
    if text is None:  # passed the walk, but does not encode
        try:
            text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"{what} is not strict JSON: {exc}") from None
        decoded = json.loads(text)
    limit = int(settings.MAX_PAYLOAD_BYTES) if limit is None else limit
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise PayloadError(f"{what} is {size} bytes, over MAX_PAYLOAD_BYTES ({limit})")
    return text, decoded


#: The types of a value whose JSON text decodes to an equal value of the same type.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(payload: Any) -> bool:
    """Whether ``payload`` is a dict of string keys to scalars (most payloads are): its
    encoded text decodes to an equal dict, so it need not be decoded to be compared.
    (A float the encoder took is finite, and ``repr`` gives it back exactly.)"""
    if type(payload) is not dict:
        return False
    for key, value in payload.items():  # a loop: most payloads have a few keys
        if type(key) is not str or type(value) not in _SCALARS:
            return False
    return True


def _may_be_refused(text: str) -> bool:
    """Whether encoded ``text`` may hold what the walk refuses: a NUL, a surrogate (a lone
    one among them), or containers nested past :data:`MAX_DEPTH` (so many brackets at all;
    those inside strings count too: a few payloads are walked that need not be)."""
    return "\\u0000" in text or "\\ud" in text or text.count("[") + text.count("{") > MAX_DEPTH


#: Compact, strict JSON: ``json.dumps(payload, allow_nan=False, separators=(",", ":"))``,
#: without making an encoder for each payload.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
#: Payloads :func:`_fast_encoder` must encode as :data:`_ENCODER` does to be used.
_SAMPLES: tuple[Any, ...] = (
    {"n": 1, "f": 0.1, "s": 'é\x00\n"', "t": True, "z": None, "l": [1, (2, {})], 3: "k"},
    "text",
    [],
    -2.5e-300,
)


def _fast_encoder() -> Callable[[Any], str]:
    """:data:`_ENCODER`'s ``encode``, or, where CPython's C encoder is there, one C encoder
    made once and called for each payload: ``encode`` makes a new one each call, a
    microsecond of a bulk call's row. It keeps no marks of the containers it is in (a
    cycle ends in the RecursionError that a payload nested too deep ends in, and the walk
    then names it). Used only if it encodes :data:`_SAMPLES` as ``encode`` does."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    try:
        chunks = make(
            None, _ENCODER.default, json.encoder.encode_basestring_ascii,
            None, ":", ",", False, False, False,
        )  # fmt: skip
        encode = partial(_joined, chunks)
        same = all(encode(sample) == _ENCODER.encode(sample) for sample in _SAMPLES)
    except (TypeError, ValueError):  # another C encoder than the one known
        return _ENCODER.encode
    return encode if same else _ENCODER.encode


def _joined(chunks: Callable[[Any, int], Iterable[str]], payload: Any) -> str:
    return "".join(chunks(payload, 0))


_encode = _fast_encoder()


def _dumps(payload: Any) -> str | None:
    """``payload`` as compact, strict JSON text; None where the encoder refuses it."""
    try:
        return _encode(payload)
    except (TypeError, ValueError, RecursionError):
        return None


def decode_payload(raw: Any) -> Any:
    """Turn a payload column's raw value into a Python value, strictly.

    Each call returns a new value, so a handler that changes its payload does
    not change what the worker read from the row. Raises :class:`PayloadError`
    for text that is not JSON (a row written by hand).
    """
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode("utf-8")
    if not isinstance(raw, str):
        raw = json.dumps(raw)  # already decoded by the database driver: copy it
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise PayloadError(f"stored payload is not valid JSON ({type(exc).__name__})") from None
