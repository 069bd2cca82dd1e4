"""How OAR-P's substituted copies are packed into forwards (torch-free: the scorer, the memory plan and
the cost plan share it).

A copy runs ``length`` new tokens of one probe over the clean KV cache of that probe's first
``cache_need`` positions. A forward is ``rows`` rows of ``width`` tokens (rows x width at most
``chunk_tokens``); a row holds one or more copies *of the same probe* one after the other, and its cache is
that probe's clean prefix, held once for all of them (a 4D mask keeps each copy to its own prefix and its
own tokens). Packing several short copies into one row is what lets the copies near the reasoning's end,
whose prefixes are long, fill a forward without one prefix copy each.

Greedy, longest first: a forward's width is fixed by the longest copy left (as many rows of it as fit in
``chunk_tokens``, widened to share the budget evenly), each row starts with the longest copy left and
takes the longest copies of the same probe that still fit without lengthening the forward's cached
prefix. That condition matters for exact OAR-P, whose long copies have short prefixes and short copies
long ones: every query of a forward attends over its longest prefix (masked, but computed), so filling
long copies' rows with short copies costs more attention than the padding it saves (by the cost plan,
5-7% more FLOPs for the paper's OAR-P runs; so does any slack of up to a row's width). Copies whose
prefixes are alike (OAR-P with a window, spans) share rows, and that is where packing pays: the rows'
cached prefixes are budgeted (rows x longest prefix at most ``CACHED_PER_CHUNK_TOKEN`` x ``chunk_tokens``),
so unpacked they would need one forward per few copies; packed, a forward with long prefixes gets
fewer, wider rows.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

# Each row materialises its probe's cached prefix for every layer (transformers' cache concatenates past
# and new keys per row): at most this many cached positions per chunk token. Without it a 7B forward of
# 4,096 tokens of short copies could hold 160 rows of 3,500 cached positions (31 GB of keys and values).
CACHED_PER_CHUNK_TOKEN = 8
FILL_CANDIDATES = 16  # lengths looked at for each fill: keeps the packing linear in the copies


@dataclass(frozen=True)
class PackedForward:
    """One forward: packed copies [begin, end) (positions in the packed order) in ``rows`` rows of
    ``width`` tokens over ``cache_len`` cached positions."""

    begin: int
    end: int
    rows: int
    width: int
    cache_len: int

    @property
    def tokens(self) -> int:
        """Token slots the forward runs, padding included."""
        return self.rows * self.width


@dataclass(frozen=True)
class Placement:
    """Where a copy runs: its index in the caller's list, its forward's row and its first column there."""

    copy: int
    row: int
    offset: int


def pack_copies(probes: Sequence[int], lengths: Sequence[int], cache_needs: Sequence[int],
                chunk_tokens: int) -> tuple[list[Placement], list[PackedForward]]:
    """Pack copies (copy c reads probe ``probes[c]``, runs ``lengths[c]`` tokens, sees its probe's first
    ``cache_needs[c]`` cached positions) into forwards. Returns the placements in packed order (forward by
    forward, row by row, left to right) and the forwards. Ties go to the lower probe, then to the earlier
    copy, so the packing is deterministic."""
    if not len(probes) == len(lengths) == len(cache_needs):
        raise ValueError(f"{len(probes)} probes, {len(lengths)} lengths and {len(cache_needs)} cache needs "
                         "must be one per copy")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    if any(n < 1 for n in lengths):
        raise ValueError("every copy runs at least one token")
    buckets: dict[int, dict[int, deque[int]]] = {}  # probe -> length -> copies, in the caller's order
    present: dict[int, list[int]] = {}  # probe -> its copies' distinct lengths left, ascending
    for c, (p, n) in enumerate(zip(probes, lengths)):
        buckets.setdefault(p, {}).setdefault(n, deque()).append(c)
    for p, by_length in buckets.items():
        present[p] = sorted(by_length)
    widest_cache = max(cache_needs, default=0)  # a bound on any forward's cached positions
    cache_rows = max(1, (CACHED_PER_CHUNK_TOKEN * chunk_tokens) // max(1, widest_cache))

    def take(p: int, space: int, accept) -> int | None:
        """The earliest copy of probe p among its longest that fit in ``space`` tokens and that ``accept``
        takes (looking at the ``FILL_CANDIDATES`` longest lengths that fit), removed."""
        lengths_left = present[p]
        top = bisect.bisect_right(lengths_left, space) - 1
        for i in range(top, max(-1, top - FILL_CANDIDATES), -1):
            queue = buckets[p][lengths_left[i]]
            for k, c in enumerate(queue):
                if accept(c):
                    del queue[k]
                    if not queue:
                        lengths_left.pop(i)
                    return c
        return None

    placements: list[Placement] = []
    forwards: list[PackedForward] = []
    while True:
        left = [p for p in sorted(present) if present[p]]
        if not left:
            return placements, forwards
        longest = max(present[p][-1] for p in left)
        rows = max(1, min(chunk_tokens // longest, cache_rows))
        width = max(longest, chunk_tokens // rows)
        begin, used_rows, used_width, cache_len = len(placements), 0, 0, 0
        for row in range(rows):
            left = [p for p in sorted(present) if present[p]]
            if not left:
                break
            p = max(left, key=lambda q: (present[q][-1], -q))  # the longest copy left, lower probe on ties
            offset = 0
            # after the row's first copy, only copies that keep within the forward's cached prefix
            while (c := take(p, width - offset, lambda c: offset == 0 or cache_needs[c] <= cache_len)) is not None:
                placements.append(Placement(c, row, offset))
                offset += lengths[c]
                cache_len = max(cache_len, cache_needs[c])
            used_rows, used_width = row + 1, max(used_width, offset)
        forwards.append(PackedForward(begin, len(placements), used_rows, used_width, cache_len))
