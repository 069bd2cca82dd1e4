"""oar.files: atomic writes leave nothing on failure; JSON Lines round-trip and name a bad line."""

import hashlib

import pytest

from oar.files import atomic_open, read_jsonl, sha256_file, write_jsonl


def test_a_failed_write_leaves_neither_the_target_nor_a_temporary(tmp_path):
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError):
        with atomic_open(target) as f:
            f.write("half")
            raise RuntimeError("job died")
    assert list(tmp_path.iterdir()) == []


def test_jsonl_round_trip_and_a_bad_line_named(tmp_path):
    rows = [{"a": 1, "text": "é"}, {"a": 2}]
    write_jsonl(tmp_path / "r.jsonl", rows)
    assert read_jsonl(tmp_path / "r.jsonl") == rows
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n\n{"a": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl, line 3: not JSON"):
        read_jsonl(tmp_path / "bad.jsonl")


def test_sha256_file_is_the_hash_of_the_bytes(tmp_path):
    data = bytes(range(256)) * 5000  # over one read chunk
    (tmp_path / "b").write_bytes(data)
    assert sha256_file(tmp_path / "b") == hashlib.sha256(data).hexdigest()
