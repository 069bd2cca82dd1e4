"""The token-credit benchmark's shipped data: each response set loads only as the bytes its index hashes
and only beside the policy weights it was sampled from; its spec is the training config's; the trained
policy PRIME reads is checked file by file; the command runs an entry and stops on a bad name in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from oar.bench import response_set
from oar.experiment.config_schema import load_config
from oar.bench.response_set import ResponseSetError

ROOT = response_set.DATA_DIR.parents[2]
pytestmark = pytest.mark.skipif(not (ROOT / "oar/models/frozen/chain_f1/model.safetensors").is_file(),
                                reason="the shipped chain_f1 weights are not in this checkout")


def test_each_spec_is_its_training_config_s_sampling_and_probe():
    for policy, spec in response_set.SPECS.items():
        config = load_config(ROOT / spec.config)  # defaults filled in
        trainer, oar = config["training"]["trainer"], config["training"]["oar"]
        assert (spec.group, spec.temperature, spec.max_new_tokens) == (
            trainer["num_generations"], trainer["temperature"], trainer["max_completion_length"]), policy
        assert spec.batch_prompts * spec.group == trainer["per_device_train_batch_size"], policy
        assert (spec.own_conclusion, spec.substitute) == (oar["own_conclusion"], oar["substitute"]), policy
        assert (spec.answer_statement, spec.fallback_last_number) == (
            config["grading"]["answer_statement"], config["grading"]["last_number"]), policy
        assert spec.dataset in config["evaluation"]["benchmarks"] and policy in config["models"], policy


def test_the_shipped_set_loads_verified_and_parses():
    loaded = response_set.load("chain_f1")
    entry = response_set.index()["chain_f1"]
    assert loaded.sha256 == entry["sha256"] and len(loaded.rows) == entry["responses"] == 1600
    assert response_set.summary(loaded.rows) == {k: entry[k] for k in
                                                 ("responses", "problems", "correct", "mixed_groups",
                                                  "with_decisive_tokens")}
    from oar.models.frozen import policy_dir
    from transformers import AutoTokenizer

    probes = loaded.subset(3).probes(AutoTokenizer.from_pretrained(policy_dir("chain_f1")))
    assert len(probes) == 24 and all(p.decisive is not None for p in probes)


def test_a_changed_file_or_another_policy_stops_the_set(tmp_path, monkeypatch):
    entry = response_set.index()["chain_f1"]
    copy = tmp_path / "data"
    shutil.copytree(response_set.DATA_DIR, copy)
    rows = response_set.read_verified(copy / entry["file"], entry["sha256"])
    response_set.write([dict(rows[0], correct=not rows[0]["correct"]), *rows[1:]], copy / entry["file"])
    monkeypatch.setattr(response_set, "DATA_DIR", copy)
    with pytest.raises(ResponseSetError, match=r"chain_f1.jsonl.gz: sha256 .* not the shipped response set"):
        response_set.load("chain_f1")
    monkeypatch.setattr(response_set, "DATA_DIR", response_set.INDEX.parent)
    import oar.models.frozen as frozen

    other = {"chain_f1": {"files": {"model.safetensors": "f" * 64}}}
    monkeypatch.setattr(frozen, "index", lambda: other)
    with pytest.raises(ResponseSetError, match=r"response set chain_f1: sampled from weights 6bd2dd91"):
        response_set.load("chain_f1")


def test_the_trained_policy_is_checked_file_by_file(tmp_path, monkeypatch):
    assert (response_set.trained_policy_dir("chain_f1") / "model.safetensors").is_file()
    copy = tmp_path / "data"
    shutil.copytree(response_set.DATA_DIR, copy)
    (copy / "chain_f1.grpo" / "config.json").write_text("{}")
    monkeypatch.setattr(response_set, "DATA_DIR", copy)
    with pytest.raises(ResponseSetError, match=r"chain_f1.grpo/config.json: sha256 .* not the shipped GRPO-trained"):
        response_set.trained_policy_dir("chain_f1")


def test_each_trained_policy_has_its_card_with_the_indexed_hashes():
    for policy in response_set.SPECS:
        trained = response_set.index()[policy]["trained_policy"]
        card = (response_set.DATA_DIR / trained["dir"] / "CARD.md").read_text()
        assert card == response_set.trained_card_text(policy, trained), f"{policy}: regenerate with write_trained_card"
        for file, sha256 in trained["files"].items():
            assert f"| `{file}` |" in card and f"`{sha256}`" in card, (policy, file)


def test_the_command_scores_an_entry_and_names_a_bad_one(tmp_path):
    run = [sys.executable, "-m", "oar.bench", "credit", "--problems", "2", "--out", str(tmp_path)]
    done = subprocess.run([*run, "--scorer", "truth"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "truth: recall@10% 1.000, average precision 1.000" in done.stdout
    assert "no leaderboard row written" in done.stdout and not list(tmp_path.iterdir())
    bad = subprocess.run([*run, "--scorer", "mypkg_absent.scores:fn"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].startswith("python -m oar.bench credit: scorer 'mypkg_absent.scores:fn'")


def test_an_index_that_disagrees_with_the_codes_version_stops_naming_it(tmp_path, monkeypatch):
    """The version's hashes live in the code (SHIPPED) and in docs/benchmark.md; an index edited to other
    hashes, or of another version, is a new benchmark version, not this one."""
    import json

    raw = json.loads(response_set.INDEX.read_text())
    assert raw["version"] == response_set.BENCHMARK_VERSION == 2
    assert {p: {k: e[k] for k in ("sha256", "policy_sha256")} for p, e in raw["sets"].items()} == response_set.SHIPPED
    versions = (ROOT / "docs/benchmark.md").read_text().split("## Versions", 1)[1]
    assert f"now {response_set.BENCHMARK_VERSION})" in versions
    for policy, hashes in response_set.SHIPPED.items():
        assert hashes["sha256"] in versions and hashes["policy_sha256"] in versions, policy
    copy = tmp_path / "data"
    shutil.copytree(response_set.DATA_DIR, copy)
    monkeypatch.setattr(response_set, "DATA_DIR", copy)
    monkeypatch.setattr(response_set, "INDEX", copy / "response_sets.json")
    edited = json.loads(json.dumps(raw))
    edited["sets"]["chain_f1"]["sha256"] = "a" * 64  # and a file to match: still not version 2's set
    (copy / "response_sets.json").write_text(json.dumps(edited))
    with pytest.raises(ResponseSetError, match=r"response_sets.json: chain_f1's sha256 \(of the set's lines\) is "
                                               r"aaaaaaaaaaaaaaaa\.\.\., benchmark version 2 ships 7b99f016690b798f"
                                               r"\.\.\.: an edited index is a new benchmark version, not version 2"):
        response_set.load("chain_f1")
    (copy / "response_sets.json").write_text(json.dumps({**raw, "version": 1}))
    with pytest.raises(ResponseSetError, match=r"response_sets.json: version 1, the code is benchmark version 2"):
        response_set.load("chain_f1")
