"""docs/explanation/architecture.md names every module and every model of django_jobs, so
the map stays true as the package grows: a new module or model that the page does not
mention fails here, by name.

A module counts as named when the page's package tree lists it (``settler.py`` under
``worker/``), or when the page spells its path (``worker/settler.py``) or its dotted name
(``django_jobs.worker.settler``) anywhere. A package's ``__init__.py`` counts as the
package (``db/``); the migrations and the templates count as their folders."""

from __future__ import annotations

import re
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_jobs"
PAGE = ROOT / "docs" / "explanation" / "architecture.md"
FOLDERS_ONLY = ("migrations", "templates")  # named as folders, not file by file


def package_parts() -> list[str]:
    """Every module of the package as a path under ``django_jobs/``: ``worker/settler.py``,
    a package as its folder (``db/``, and ``""`` for django_jobs itself)."""
    parts = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in FOLDERS_ONLY:
            parts.add(f"{relative.parts[0]}/")
        elif relative.name == "__init__.py":
            parent = relative.parent.as_posix()
            parts.add("" if parent == "." else f"{parent}/")
        else:
            parts.add(relative.as_posix())
    parts.update(f"{name}/" for name in FOLDERS_ONLY if (PACKAGE / name).is_dir())
    return sorted(parts)


def tree_paths(text: str) -> set[str]:
    """The paths the page's package tree lists: a line's first word, when it names a
    folder (``worker/``) or a module (``settler.py``), is under the nearest folder above it
    that is indented less. Every folder on the way to a name counts as listed too."""
    lines = text.splitlines()
    try:
        start = lines.index("django_jobs/")
    except ValueError:
        return set()
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, path under django_jobs/)
    for line in lines[start + 1 :]:
        if line.startswith("```"):
            break
        words = line.split()
        if not words or not words[0].endswith(("/", ".py")):
            continue  # a blank line, or the next line of a description
        indent = len(line) - len(line.lstrip())
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = (folders[-1][1] if folders else "") + words[0]
        segments = path.split("/")
        listed.update("/".join(segments[:n]) + "/" for n in range(1, len(segments)))
        listed.add(path)
        if path.endswith("/"):
            folders.append((indent, path))
    return listed | {""}


def mentioned(part: str, text: str, listed: set[str]) -> bool:
    dotted = "django_jobs." + part.removesuffix("/").removesuffix(".py").replace("/", ".")
    spelled = part and re.search(rf"(?<![\w/]){re.escape(part)}(?![\w])", text)
    return part in listed or bool(spelled) or re.search(rf"{re.escape(dotted)}\b", text) is not None


def missing_modules(text: str) -> list[str]:
    listed = tree_paths(text)
    return [f"django_jobs/{p}" for p in package_parts() if not mentioned(p, text, listed)]


def missing_models(text: str) -> list[str]:
    models = apps.get_app_config("django_jobs").get_models()
    return sorted(m.__name__ for m in models if re.search(rf"\b{m.__name__}\b", text) is None)


def test_docs_architecture_tree_reads_nesting_by_indent():
    text = (
        "```\ndjango_jobs/\n  db/   the seam\n    base.py  the driver,\n"
        "      as in x.py\n  cron.py\n```\n"
    )
    assert tree_paths(text) == {"", "db/", "db/base.py", "cron.py"}


def test_docs_architecture_accepts_a_path_or_a_dotted_name():
    assert mentioned("worker/settler.py", "see `worker/settler.py`", set())
    assert mentioned("worker/settler.py", "see django_jobs.worker.settler.", set())
    assert not mentioned("worker/settler.py", "see django_jobs.worker.settlers", set())
    assert not mentioned("db/base.py", "see db/base.pyi", set())


def test_docs_architecture_names_every_module():
    missing = missing_modules(PAGE.read_text(encoding="utf-8"))
    assert not missing, f"{PAGE.name} does not name these modules:\n" + "\n".join(missing)


def test_docs_architecture_names_every_model():
    missing = missing_models(PAGE.read_text(encoding="utf-8"))
    assert not missing, f"{PAGE.name} does not name these models:\n" + "\n".join(missing)
