"""Keep secrets out of stored errors, logs and the admin, by Django's own convention.

A payload key whose name matches the pattern Django hides settings by
(``SafeExceptionReporterFilter.hidden_settings``: API, AUTH, TOKEN, KEY,
SECRET, PASS, SIGNATURE, and COOKIE; any case, anywhere in the name), at any
depth, holds a secret: its value, or every string and number inside it.
``DJANGO_JOBS["HIDDEN_PAYLOAD_KEYS"]`` adds patterns. Each secret is replaced
by ``***`` wherever it appears in a text, as written or as ``repr`` or JSON
escape it; one under 4 characters only where it stands as a whole word.
Other values stay readable. A secret the handler transformed (reversed,
hashed, split) is not recognised.

Masking is linear in the size of the text and of the secrets: one pass of
an Aho-Corasick automaton over the text.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from django.views.debug import SafeExceptionReporterFilter

from .conf import settings
from .text import storable_text

MASK = "***"
SHORT = 4  # secrets shorter than this are masked only as whole words

Mask = Callable[[str], str]


def django_pattern() -> str:
    """Django's pattern for hidden settings, plus COOKIE (Django's says HTTP_COOKIE)."""
    return f"{SafeExceptionReporterFilter.hidden_settings.pattern}|COOKIE"


@functools.lru_cache(maxsize=8)
def compile_pattern(extra: tuple[str, ...] = ()) -> re.Pattern[str]:
    """Django's pattern and ``extra`` patterns, in one case-insensitive regex."""
    parts = [django_pattern(), *extra]
    return re.compile("|".join(f"(?:{part})" for part in parts), re.IGNORECASE)


def secret_pattern() -> re.Pattern[str]:
    """The pattern of secret key names, with ``HIDDEN_PAYLOAD_KEYS`` added."""
    return compile_pattern(tuple(settings.HIDDEN_PAYLOAD_KEYS))


def _is_secret(key: object, pattern: re.Pattern[str]) -> bool:
    return isinstance(key, str) and pattern.search(key) is not None


def secret_values(payload: Any, pattern: re.Pattern[str] | None = None) -> set[str]:
    """The text of every string and number held under a secret key, at any depth."""
    pattern = pattern or secret_pattern()
    found: set[str] = set()
    stack: list[tuple[Any, bool]] = [(payload, False)]
    while stack:
        value, secret = stack.pop()
        if isinstance(value, dict):
            stack.extend((item, secret or _is_secret(key, pattern)) for key, item in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((item, secret) for item in value)
        elif secret and isinstance(value, str):
            found.update(_forms(value))
        elif secret and isinstance(value, (int, float)) and not isinstance(value, bool):
            found.add(str(value))
    return {value for value in found if value.strip()}  # blanks hide nothing


def _forms(value: str) -> tuple[str, ...]:
    """``value`` as a message may show it: as is, as ``repr`` and JSON escape it, storable."""
    return (value, repr(value)[1:-1], json.dumps(value)[1:-1], storable_text(value))


def mask_payload(payload: Any, pattern: re.Pattern[str] | None = None) -> Any:
    """A copy of ``payload`` with the value under each secret key replaced by ``***``."""
    pattern = pattern or secret_pattern()
    root = [payload]
    stack: list[tuple[Any, Any]] = [(root, 0)]  # a copied container, and where in it to copy
    while stack:
        holder, place = stack.pop()
        value = holder[place]
        if isinstance(value, dict):
            copy: Any = {
                key: MASK if _is_secret(key, pattern) else item for key, item in value.items()
            }
            stack.extend((copy, key) for key, item in copy.items() if item is not MASK)
        elif isinstance(value, (list, tuple)):
            copy = list(value)
            stack.extend((copy, index) for index in range(len(copy)))
        else:
            continue
        holder[place] = copy
    return root[0]


def masked_json(payload: Any) -> str:
    """``payload`` as JSON text, the values under secret keys replaced by ``"***"``."""
    return json.dumps(mask_payload(payload), ensure_ascii=False)


def masker(payload: Any) -> Mask:
    """A function that masks ``payload``'s secrets in a text."""
    secrets = secret_values(payload)
    if not secrets:
        return _unchanged
    return _Automaton(secrets).mask


def redact(text: str, payload: Any) -> str:
    """``text`` with ``payload``'s secrets masked."""
    return masker(payload)(text)


def _unchanged(text: str) -> str:
    return text


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


class _Automaton:
    """Aho-Corasick over the secrets: finds every occurrence in one pass over a text."""

    def __init__(self, words: Iterable[str]) -> None:
        self.goto: list[dict[str, int]] = [{}]
        self.fail: list[int] = [0]
        self.longest: list[int] = [0]  # the longest word of SHORT or more ending here
        self.shorts: list[tuple[int, ...]] = [()]  # the lengths of shorter words ending here
        for word in words:
            self._add(word)
        self._link()

    def _add(self, word: str) -> None:
        node = 0
        for char in word:
            following = self.goto[node].get(char)
            if following is None:
                following = len(self.goto)
                self.goto[node][char] = following
                self.goto.append({})
                self.fail.append(0)
                self.longest.append(0)
                self.shorts.append(())
            node = following
        if len(word) >= SHORT:
            self.longest[node] = len(word)
        else:
            self.shorts[node] = (len(word),)

    def _link(self) -> None:
        """Breadth first: each node's failure link and the words that end there."""
        queue = list(self.goto[0].values())
        for node in queue:  # the queue grows while it is read
            for char, child in self.goto[node].items():
                queue.append(child)
                link = self.fail[node]
                while link and char not in self.goto[link]:
                    link = self.fail[link]
                target = self.goto[link].get(char, 0)
                self.fail[child] = target if target != child else 0
                self.longest[child] = self.longest[child] or self.longest[self.fail[child]]
                self.shorts[child] = self.shorts[child] + self.shorts[self.fail[child]]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The merged (start, end) spans of ``text`` that hold a secret."""
        goto, fail, longest, shorts = self.goto, self.fail, self.longest, self.shorts
        merged: list[tuple[int, int]] = []
        node = 0
        for index, char in enumerate(text):
            while node and char not in goto[node]:
                node = fail[node]
            node = goto[node].get(char, 0)
            if not node:
                continue
            end = index + 1
            if longest[node]:
                _merge(merged, end - longest[node], end)
            for length in shorts[node]:
                start = end - length
                before = start > 0 and _is_word(text[start - 1])
                after = end < len(text) and _is_word(text[end])
                if not before and not after:
                    _merge(merged, start, end)
        return merged

    def mask(self, text: str) -> str:
        parts: list[str] = []
        position = 0
        for start, end in self.spans(text):
            parts += [text[position:start], MASK]
            position = end
        parts.append(text[position:])
        return "".join(parts)


def _merge(spans: list[tuple[int, int]], start: int, end: int) -> None:
    """Add a span whose end is at or after every earlier end, merging what it touches."""
    while spans and start <= spans[-1][1]:
        start = min(start, spans.pop()[0])
    spans.append((start, end))


def validate_patterns(patterns: object) -> list[str]:
    """The errors in a ``HIDDEN_PAYLOAD_KEYS`` value: none for a list of valid regexes."""
    if not isinstance(patterns, (list, tuple)):
        return [f"must be a list of regular expressions, got {type(patterns).__name__}"]
    errors: list[str] = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            errors.append(f"{pattern!r} is not a non-empty string")
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            errors.append(f"{pattern!r} is not a valid regular expression ({exc})")
    return errors
