"""Payloads are strict JSON: the same payload is refused on every database."""

from __future__ import annotations

import json
import math
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


def encode_payload(payload: Any, what: str = "payload") -> str:
    """Serialise ``payload`` to JSON text, or raise :class:`PayloadError`.

    A handler's return value goes through the same rules (``what`` names it).
    """
    check_payload(payload, what)
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # a type that passed the walk but does not encode
        raise PayloadError(f"{what} is not strict JSON: {exc}") from None
    limit = int(settings.MAX_PAYLOAD_BYTES)
    size = len(text.encode("utf-8"))
    if size > limit:
        raise PayloadError(f"{what} is {size} bytes, over MAX_PAYLOAD_BYTES ({limit})")
    return text


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
