"""A ``runjobs`` whose wall clock the test steps while it runs: libfaketime.

:class:`SteppedClock` gives the environment of such a process: libfaketime
preloaded, reading the offset of the wall clock from a file on every call (so
that :meth:`SteppedClock.step` moves it at once), and leaving the monotonic
clock alone, as an NTP step or a ``date`` by hand does. It needs libfaketime
(``apt-get install libfaketime``): :func:`library` finds it, or returns None.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

SITE = Path(__file__).resolve().parent / "faketime_site"  # its sitecustomize: see there


def library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


class SteppedClock:
    """A wall clock offset by what :meth:`step` last set (from +0 s)."""

    def __init__(self, library: str, directory: Path) -> None:
        self.library = library
        self.file = directory / "faketime"
        self.step(0)

    def step(self, seconds: int) -> None:
        """Set the wall clock ``seconds`` off the true time (in one rename: a reader never
        sees half a file)."""
        written = self.file.with_suffix(".new")
        written.write_text(f"{seconds:+d}s\n")
        os.replace(written, self.file)

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": self.library,
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": str(SITE),
        }
