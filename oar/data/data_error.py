"""The error of data a user can fix: one line naming the file (and line) and the fault."""

from __future__ import annotations


class DataError(ValueError):
    """A user-fixable data problem; the message is one line naming the file (and line) and the fault."""
