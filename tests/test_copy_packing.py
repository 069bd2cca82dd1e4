"""The packing of OAR-P's substituted copies into forwards (oar.method.copy_packing): every copy once, a
row holds copies of one probe side by side within its width, the token and cache budgets hold, and the
packing is deterministic."""

from __future__ import annotations

import random

import pytest

from oar.method.copy_packing import CACHED_PER_CHUNK_TOKEN, pack_copies

pytestmark = pytest.mark.quick


def _exact_copies(responses: int, prompt: int, reasoning: int, tail: int):
    """Exact OAR-P's copies of alike responses: copy a runs reasoning position a to the end over the
    prompt and a reasoning tokens."""
    probes, lengths, cache = [], [], []
    for i in range(responses):
        for a in range(reasoning):
            probes.append(i)
            lengths.append(reasoning - a + tail)
            cache.append(prompt + a)
    return probes, lengths, cache


def _check(probes, lengths, cache, chunk):
    placements, forwards = pack_copies(probes, lengths, cache, chunk)
    assert sorted(p.copy for p in placements) == list(range(len(probes)))  # every copy exactly once
    assert forwards[0].begin == 0 and forwards[-1].end == len(placements)
    assert all(a.end == b.begin for a, b in zip(forwards, forwards[1:]))
    for f in forwards:
        assert f.rows == 1 or f.tokens <= chunk
        assert f.rows == 1 or f.rows * f.cache_len <= CACHED_PER_CHUNK_TOKEN * chunk
        members = placements[f.begin : f.end]
        assert f.cache_len == max(cache[p.copy] for p in members)
        by_row: dict[int, list] = {}
        for p in members:
            by_row.setdefault(p.row, []).append(p)
        assert sorted(by_row) == list(range(f.rows))  # no empty row
        for row in by_row.values():
            assert len({probes[p.copy] for p in row}) == 1  # one probe a row: its prefix is the row's cache
            column = 0
            for p in row:  # side by side, in order, within the width
                assert p.offset == column
                column += lengths[p.copy]
            assert column <= f.width
        assert f.width == max(sum(lengths[p.copy] for p in row) for row in by_row.values())
    return placements, forwards


@pytest.mark.parametrize("responses, reasoning, chunk", [(1, 30, 64), (3, 40, 100), (8, 120, 512), (5, 37, 1)])
def test_exact_copies_pack_within_the_budgets(responses, reasoning, chunk):
    probes, lengths, cache = _exact_copies(responses, 20, reasoning, 6)
    _, forwards = _check(probes, lengths, cache, chunk)
    if chunk >= 2 * max(lengths):
        # rows are filled with short copies of the same response: padding is a few percent at most
        assert sum(f.tokens for f in forwards) <= 1.06 * sum(lengths)


def test_random_copies_pack_within_the_budgets():
    rng = random.Random(3)
    for _ in range(30):
        n = rng.randint(1, 60)
        probes = [rng.randrange(4) for _ in range(n)]
        lengths = [rng.randint(1, 50) for _ in range(n)]
        cache = [rng.randint(0, 400) for _ in range(n)]
        _check(probes, lengths, cache, rng.choice([1, 16, 64, 200]))


def test_long_prefixes_get_fewer_wider_rows_not_more_forwards():
    """Short copies over long prefixes: the cache budget caps the rows, and each row takes several copies."""
    probes, lengths, cache = [0] * 200, [10] * 200, [1000] * 200
    _, forwards = _check(probes, lengths, cache, 256)
    assert all(f.rows <= CACHED_PER_CHUNK_TOKEN * 256 // 1000 for f in forwards)
    assert len(forwards) == -(-2000 // (2 * 120))  # 2 rows of 12 copies (120 tokens) a forward


def test_the_packing_is_deterministic_and_ties_go_to_the_lower_probe():
    probes, lengths, cache = _exact_copies(4, 10, 25, 3)
    assert pack_copies(probes, lengths, cache, 96) == pack_copies(probes, lengths, cache, 96)
    placements, forwards = pack_copies([1, 0], [5, 5], [0, 0], 5)  # two forwards of one copy each
    assert len(forwards) == 2 and [p.copy for p in placements] == [1, 0]  # copy 1 reads probe 0: it goes first


@pytest.mark.parametrize("kwargs, match", [
    (dict(probes=[0], lengths=[1, 2], cache_needs=[0], chunk_tokens=4), "one per copy"),
    (dict(probes=[0], lengths=[1], cache_needs=[0], chunk_tokens=0), "chunk_tokens"),
    (dict(probes=[0], lengths=[0], cache_needs=[0], chunk_tokens=4), "at least one token"),
])
def test_bad_input_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pack_copies(**kwargs)
