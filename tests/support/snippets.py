"""The Python snippets of the docs, as a reader copies them."""

from __future__ import annotations

import re
from pathlib import Path

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[str]:
    """The source of every ```python block of ``page``, in order."""
    return PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))


def block_headed(page: Path, header: str) -> str:
    """The one ```python block of ``page`` whose first line is ``header``."""
    [block] = [b for b in python_blocks(page) if b.splitlines()[:1] == [header]]
    return block
