"""The ground-truth track's outputs: the per-token scores file, the tables' `reads` and step-level
columns, the record's JSON Schema, the plots, `--skip`, and a row submitted and verified by rerunning it
(on the shipped chain_f1 set with the cheap `random` and `position` entries)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

from oar.bench import credit, leaderboard, response_set, scores_file, submission

ROOT = response_set.DATA_DIR.parents[2]
SHIPPED = (ROOT / "oar/models/frozen/chain_f1/model.safetensors").is_file()


def rows_of(n: int) -> list[dict]:
    return [{"problem": i // 2, "sample": i % 2} for i in range(n)]


def test_the_scores_file_keeps_each_row_and_hashes_its_content(tmp_path):
    scores = [np.array([0.5, 1.0, 2.0]), np.array([]), np.array([-1.0, 3.25])]
    path = tmp_path / "x.scores.npz"
    digest = scores_file.write(path, scores, rows_of(3))
    arrays = scores_file.read(path)
    assert arrays["offsets"].tolist() == [0, 3, 3, 5] and arrays["problem"].tolist() == [0, 0, 1]
    assert arrays["sample"].tolist() == [0, 1, 0] and arrays["scores"].dtype == np.float32
    assert [r.tolist() for r in scores_file.rows_of(arrays)] == [[0.5, 1.0, 2.0], [], [-1.0, 3.25]]
    # the hash by hand: the offsets' int64 bytes then the scores' float32 bytes, little-endian
    by_hand = hashlib.sha256(np.array([0, 3, 3, 5], "<i8").tobytes()
                             + np.array([0.5, 1, 2, -1, 3.25], "<f4").tobytes()).hexdigest()
    assert digest == by_hand == scores_file.content_sha256(arrays)
    assert scores_file.write(tmp_path / "again.scores.npz", scores, rows_of(3)) == digest
    assert scores_file.path_for(tmp_path / "oar_g.json") == tmp_path / "oar_g.scores.npz"
    np.savez(tmp_path / "bad.npz", scores=np.zeros(4, np.float32), offsets=np.array([0, 5]),
             problem=np.zeros(1, np.int32), sample=np.zeros(1, np.int32))
    with pytest.raises(ValueError, match=r"bad.npz: its offsets do not cut its scores"):
        scores_file.read(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match=r"missing.npz: no scores file"):
        scores_file.read(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="2 score rows for 3 responses"):
        scores_file.pack(scores[:2], rows_of(3))


ROW = {"problem": 0, "sample": 0, "reasoning_len": 6, "correct": False, "decisive": [1, 2, 4, 5],
       "steps": [{"positions": [1, 2], "relation": "~", "relation_at": 1, "right": False},
                 {"positions": [4, 5], "relation": "=", "relation_at": 4, "right": True}]}


def record_of(entry: str, values: np.ndarray, **extra) -> dict:
    """A record as run_entry writes it, of scores evaluated on two copies of ROW (two problems)."""
    rows = [ROW, dict(ROW, problem=1)]
    return {"entry": entry, "track": "credit", "version": 1, "policy": "tiny", "policy_sha256": "a" * 64,
            "response_set_sha256": "b" * 64, "seed": 0, "seconds": 0.5,
            "result": credit.evaluate(entry, [values, values], rows),
            "made_with": {"commit": "c" * 40, "dirty": False, "cpu_kernels": "AVX2", "mkl_branch": "AVX2",
                          "threads": 1, "torch": "2"}, **extra}


def test_the_tables_show_what_each_entry_reads_and_its_step_level_scores():
    blame = record_of("blame", np.array([0, 5, 5, 0, 1, 1.0]), reads=["model"], ground_truth=False)
    truth = record_of("truth", np.array([0, 1, 1, 0, 1, 1.0]), reads=["decisive"], ground_truth=True)
    old = record_of("old", np.zeros(6))  # a record without reads: rendered as n/a
    frame, text = leaderboard.credit_table([blame, truth, old])
    lines = text.splitlines()
    # both rank every decisive token first (AP 1): in the order given; the dagger marks the answer key's
    (row,) = [line for line in lines if line.startswith("| 1 | `blame` |")]
    assert "| model |" in row
    assert any(line.startswith("| 2 | `truth`\u2020 |") and "| decisive |" in line for line in lines)
    assert any(line.startswith("| 3 | `old`") and "| n/a |" in line for line in lines)
    assert "\u2020 reads the answer key" in text
    # the step-level table: blame's erring step 1 holds credit 5 against 1 (flagged, located), truth's
    # credit is flat (located in half the orders, never flagged)
    (step_row,) = [line for line in lines if line.startswith("| `blame` |")]
    assert step_row.startswith("| `blame` | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | n/a | n/a |")
    (truth_row,) = [line for line in lines if line.startswith("| `truth`\u2020 |")]
    assert truth_row.startswith("| `truth`\u2020 | 0.500 [0.500, 0.500] | 0.000 [0.000, 0.000] |")
    assert "| chance (a step drawn uniformly) | 0.500 |" in text
    assert frame.loc[frame.entry == "blame", "first_error"].item() == 1.0
    assert frame.loc[frame.entry == "truth", "ground_truth"].item() is True


def test_the_record_schema_accepts_a_record_and_names_what_is_wrong():
    record = record_of("blame", np.array([0, 5, 5, 0, 1, 1.0]), reads=["model"], ground_truth=False,
                       scores={"file": "blame.scores.npz", "sha256": "d" * 64})
    leaderboard.validate_record(record, "blame.json")
    broken = json.loads(json.dumps(record))
    del broken["result"]["step_level"]["processbench_f1"]
    with pytest.raises(ValueError, match=r"blame.json: result/step_level: 'processbench_f1' is a required property"):
        leaderboard.validate_record(broken, "blame.json")
    with pytest.raises(ValueError, match=r"policy_sha256"):
        leaderboard.validate_record({**record, "policy_sha256": "short"}, "blame.json")
    assert "entry_record.schema.json" in (ROOT / "pyproject.toml").read_text()  # shipped as package data


def test_skip_names_an_entry_that_is_not_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "oar.bench", "credit", "--scorer", "random", "--skip", "oar_p",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == ("python -m oar.bench credit: --skip oar_p is not among the "
                                                    "entries to run (random)")


def bench(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oar.bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.skipif(not SHIPPED, reason="the shipped chain_f1 weights are not in this checkout")
def test_a_row_is_written_with_its_scores_plotted_submitted_and_verified(tmp_path):
    out = tmp_path / "bench"
    done = bench("credit", "--scorer", "random", "--scorer", "position", "--scorer", "truth", "--skip", "truth",
                 "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    where = leaderboard.folder(out, "credit", "chain_f1", response_set.BENCHMARK_VERSION)
    assert sorted(p.name for p in where.glob("*.json")) == ["position.json", "random.json"]  # truth skipped
    rows = response_set.load("chain_f1").rows
    for entry in ("random", "position"):
        record = json.loads((where / f"{entry}.json").read_text())
        leaderboard.validate_record(record, f"{entry}.json")  # a real record against the schema
        arrays = scores_file.read(where / record["scores"]["file"])
        assert scores_file.content_sha256(arrays) == record["scores"]["sha256"]
        assert np.diff(arrays["offsets"]).tolist() == [r["reasoning_len"] for r in rows]
        # the file's scores give the record's numbers (both entries' scores are exact in float32)
        again = credit.evaluate(entry, [s.astype(np.float64) for s in scores_file.rows_of(arrays)], rows)
        assert submission.differences(record["result"], json.loads(json.dumps(again))) == []
    position = scores_file.rows_of(scores_file.read(where / "position.scores.npz"))
    assert position[0].tolist() == sorted(position[0].tolist())  # position: later tokens score higher
    plotted = bench("plot", "--out", str(out))
    assert plotted.returncode == 0, plotted.stderr[-2000:]
    assert all((where / f).stat().st_size > 0 for f in ("leaderboard.png", "leaderboard.pdf", "steps.png"))

    sub = tmp_path / "sub.json"
    submitted = bench("submit", "--scorer", "random", "--out", str(out), "--to", str(sub))
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    data = json.loads(sub.read_text())
    assert data["record"] == json.loads((where / "random.json").read_text())
    assert data["scorer"]["import_path"] == "oar.method.builtin_scorers:random"
    assert data["scores_sha256"] == data["record"]["scores"]["sha256"]
    verified = bench("verify", str(sub))
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert "scores: the same" in verified.stdout and "verified: random on chain_f1" in verified.stdout
    # a submission whose number was edited is not verified, and the verdict names the number
    data["record"]["result"]["average_precision"]["mean"] += 0.01
    sub.write_text(json.dumps(data))
    edited = bench("verify", str(sub))
    assert edited.returncode == 1 and "NOT verified: random on chain_f1" in edited.stdout
    assert "result.average_precision.mean:" in edited.stdout
    # another scorer's code under the submitted name stops before anything is scored
    data["scorer"]["code_sha256"] = "0" * 64
    sub.write_text(json.dumps(data))
    other = bench("verify", str(sub), timeout=120)
    assert other.returncode != 0 and "is not the submitted code" in other.stderr.strip().splitlines()[-1]
    # submit names a row that was never written (--problems writes none)
    missing = bench("submit", "--scorer", "entropy", "--out", str(out), timeout=120)
    assert missing.returncode != 0 and "no row of 'entropy'" in missing.stderr.strip().splitlines()[-1]
