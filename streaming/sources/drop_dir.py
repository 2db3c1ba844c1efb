"""Which files of a drop directory are complete: the ``dumps`` source's planner lists them with
no decoder imported (the Python processes Spark starts to plan a read never read one; issue 23)."""

from __future__ import annotations

import os

# A file is picked up from a drop directory only under its final name: writers create it as
# ".name" or "name.tmp"/".part"/".partial"/".inprogress" and rename it when complete.
IN_PROGRESS_SUFFIXES = (".tmp", ".part", ".partial", ".inprogress", ".swp", ".crdownload")


def is_ready(name: str) -> bool:
    base = os.path.basename(name)
    return bool(base) and not base.startswith(".") and not base.endswith(IN_PROGRESS_SUFFIXES)
