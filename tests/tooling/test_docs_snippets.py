"""The Python snippets of the README and the tutorial stand on their own: each compiles and
imports or defines every name it uses, and one headed with a file of this repository
(``# testproject/example/views.py``) is that file's code. The README's tour also runs, in a
project of its own: tests/tooling/test_readme_tour.py."""

from __future__ import annotations

import builtins
import symtable
from pathlib import Path

import pytest

from tests.support.snippets import python_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "tutorial.md"]
SNIPPETS = [
    pytest.param(block, id=f"{page.name}:{number}")
    for page in PAGES
    for number, block in enumerate(python_blocks(page), 1)
]


def unbound_names(source: str) -> set[str]:
    """Names ``source`` reads that it neither imports nor defines, and are not builtins."""
    module = symtable.symtable(source, "<snippet>", "exec")
    bound = {s.get_name() for s in module.get_symbols() if s.is_assigned() or s.is_imported()}
    missing: set[str] = set()
    tables = [module]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if symbol.is_referenced() and symbol.is_global() and name not in bound:
                if not hasattr(builtins, name):
                    missing.add(name)
    return missing


def excerpted_lines(block: str) -> list[str]:
    """The lines of an excerpt that must be in its file: not its header, blank lines or `...`."""
    return [line for line in block.splitlines()[1:] if line.strip() not in ("", "...")]


def in_order(lines: list[str], text: str) -> bool:
    remaining = iter(line.rstrip() for line in text.splitlines())
    return all(any(line == candidate for candidate in remaining) for line in lines)


def test_the_docs_have_python_snippets_to_check():
    assert len(SNIPPETS) >= 8


@pytest.mark.parametrize("block", SNIPPETS)
def test_docs_snippet_imports_every_name_it_uses(block):
    assert unbound_names(block) == set(), block


def test_unbound_names_finds_a_name_used_in_a_function_but_not_imported():
    # What the README's job once did: send_mail called, never imported.
    source = "from django_jobs import job\n\n@job('x')\ndef f(ctx, payload):\n    send_mail()\n"
    assert unbound_names(source) == {"send_mail"}
    assert unbound_names("from django.core.mail import send_mail\n" + source) == set()


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(block, id=block.splitlines()[0])
        for page in PAGES
        for block in python_blocks(page)
        if (ROOT / block.splitlines()[0].removeprefix("# ")).is_file()
    ],
)
def test_docs_snippet_headed_with_a_file_is_that_files_code(block):
    path = ROOT / block.splitlines()[0].removeprefix("# ")
    assert in_order(excerpted_lines(block), path.read_text(encoding="utf-8")), (
        f"the snippet differs from {path.relative_to(ROOT)}:\n{block}"
    )


def test_in_order_wants_every_line_in_the_files_order():
    text = "a = 1\nb = 2\n\nc = 3\n"
    assert in_order(["a = 1", "c = 3"], text)
    assert not in_order(["c = 3", "a = 1"], text)
    assert not in_order(["a = 1", "d = 4"], text)
