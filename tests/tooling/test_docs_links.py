"""Every relative link in README.md and docs/ points to a file that exists, and a
``file.md#anchor`` to a heading that makes that anchor (as GitHub renders it)."""

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^ {0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1", re.DOTALL)
# [text](target) and ![alt](target), the text possibly over several lines;
# the target may be in <...> and followed by a "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def unfenced(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return kept


def prose(text: str) -> str:
    """The text without code blocks and inline code, where a link is not a link."""
    return INLINE_CODE.sub("", "\n".join(unfenced(text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of ``page``'s headings; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in unfenced(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def targets(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return [m.group(1) for m in LINK.finditer(text)] + REFERENCE.findall(text)


def broken_links(page: Path) -> list[str]:
    """What is wrong with ``page``'s relative links, one line each."""
    problems = []
    for target in targets(page):
        if not target or EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / unquote(path)).resolve() if path else page
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor.lower() not in anchors(linked):
            problems.append(f"{target}: no heading makes #{anchor} in {linked.name}")
    return problems


def test_docs_links_slug_follows_github():
    assert slug("Django's Tasks framework (`JobsBackend`)") == "djangos-tasks-framework-jobsbackend"
    assert slug("Secrets in errors, logs and the admin") == "secrets-in-errors-logs-and-the-admin"
    assert slug("The [admin](x.md) at a million rows") == "the-admin-at-a-million-rows"


def test_docs_links_a_missing_file_or_anchor_is_reported(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n\n## A `section`\n")
    page.write_text(
        "[fine](other.md#a-section) [again](other.md#a-section-1) [self](#top)\n"
        "# Top\n[gone](missing.md) [no anchor](other.md#nowhere)\n"
        "```\n[in code](missing.md)\n```\n`[inline](missing.md)` [web](https://example.com/x)\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading makes #nowhere in other.md",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_links_point_to_files_and_headings_that_exist(page):
    problems = broken_links(page)
    assert not problems, "broken links:\n" + "\n".join(problems)
