# SPDX-License-Identifier: MIT
"""Checks of plain Python arguments (sizes, counts) with qg's messages."""
from __future__ import annotations

import operator


def int_arg(value, name: str, fn: str, expected: str = "an int") -> int:
    """value as an int (anything with __index__, but not bool), else a TypeError naming fn and name."""
    if isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be {expected}, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be {expected}, got {type(value).__name__} {value!r}") from None
