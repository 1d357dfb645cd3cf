"""Counts in the words a person writes: "1 device", "2 devices" (issue 38: "1 entries",
"1 devices", "1 ranks" in logs and plans)."""

from __future__ import annotations


def counted(n: int, one: str, many: str | None = None) -> str:
    """'1 rank', '3 ranks'; `many` where the plural is not `one` + s ('1 entry', '2 entries')."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
