"""Payloads are strict JSON: the same payload is refused on every database."""

from __future__ import annotations

import json
from typing import Any

from .conf import settings
from .exceptions import PayloadError


def _check_value(value: Any, path: str) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise PayloadError(f"payload{path} contains a NUL character (\\u0000)")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(f"payload{path} has a key that is not a string: {key!r}")
            if "\x00" in key:
                raise PayloadError(f"payload{path} has a key with a NUL character (\\u0000)")
            _check_value(item, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]")


def encode_payload(payload: Any) -> str:
    """Serialise ``payload`` to JSON text, or raise :class:`PayloadError`."""
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except ValueError as exc:  # NaN or infinity, or a circular reference
        raise PayloadError(f"payload is not strict JSON: {exc}") from None
    except TypeError as exc:
        raise PayloadError(f"payload is not JSON serializable: {exc}") from None
    _check_value(payload, "")
    limit = int(settings.MAX_PAYLOAD_BYTES)
    size = len(text.encode("utf-8"))
    if size > limit:
        raise PayloadError(f"payload is {size} bytes, over MAX_PAYLOAD_BYTES ({limit})")
    return text


def decode_payload(raw: Any) -> Any:
    """Turn a payload column's raw value into a Python value, strictly.

    Raises :class:`PayloadError` for text that is not JSON (a row written by hand).
    """
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode("utf-8")
    if not isinstance(raw, str):
        return raw  # already decoded by the database driver
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise PayloadError(f"stored payload is not valid JSON ({type(exc).__name__})") from None
