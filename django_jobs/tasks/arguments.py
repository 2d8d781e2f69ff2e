"""A task's arguments as JSON, each refusal naming the argument.

Django's rule is ``normalize_json``'s (tuples become lists, bytes text); then
the payload's own rule (:mod:`django_jobs.payloads`: no ``nan``, no NUL
character, ...), as ``schedule_job()`` applies it. A refusal names the argument,
and the value inside it, as ``schedule_job()`` names a payload's key:
``argument 2 is a datetime, not JSON``, ``keyword argument 'when'[0] is nan, not
strict JSON``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..payloads import check_payload
from .framework import normalize_json


def json_arguments(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` as JSON; ``TypeError`` (Django's) or
    :class:`~django_jobs.exceptions.PayloadError` naming the first that is not."""
    positional = [json_argument(value, f"argument {n}") for n, value in enumerate(args, start=1)]
    named = {
        key: json_argument(value, f"keyword argument {key!r}") for key, value in kwargs.items()
    }
    return positional, named


def json_argument(value: Any, where: str) -> Any:
    try:
        normalized = normalize_json(value)
    except (TypeError, ValueError):
        path, found = refused_part(value, where)
        raise TypeError(f"{path} is {kind(found)}, not JSON") from None
    check_payload(normalized, where)
    return normalized


def refused_part(value: Any, where: str) -> tuple[str, Any]:
    """The path and value, inside ``value``, that ``normalize_json`` refuses (as it walks)."""
    while True:
        inner = None
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not accepted(key):
                    return f"{where} has a key that", key
                if not accepted(item):
                    inner = (f"{where}[{key!r}]", item)
                    break
        elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
            for index, item in enumerate(value):
                if not accepted(item):
                    inner = (f"{where}[{index}]", item)
                    break
        if inner is None:
            return where, value
        where, value = inner


def accepted(value: Any) -> bool:
    try:
        normalize_json(value)
    except (TypeError, ValueError):
        return False
    return True


def kind(value: Any) -> str:
    if isinstance(value, bytes):
        return "bytes that are not UTF-8"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
