"""Generation backends, resumable evaluation, summaries and the evaluate script."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from oar.evaluation.benchmark import (
    CONFIG_FILE,
    SAMPLES_FILE,
    EvalConfigMismatch,
    EvalSettings,
    chunk_seed,
    grade_outputs,
    k_values,
    read_samples,
    run_generation,
    summarize,
)
from oar.evaluation.generation import GenerationOutput, TransformersGenerator, make_generator

REPO = Path(__file__).resolve().parents[1]

PROBLEMS = [
    {"id": "t/0", "problem": "What is 2+3?", "answer": "5"},
    {"id": "t/1", "problem": "What is 10*10?", "answer": "100"},
    {"id": "t/2", "problem": "Half of 1?", "answer": "\\frac{1}{2}"},
    {"id": "t/3", "problem": "What is 7-7?", "answer": "0"},
]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", REPO / "workflow_scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeGenerator:
    """Answers problem i with \\boxed{<reference>} on even sample indices, a wrong number on odd ones."""

    tokenizer = None
    chat = False

    def __init__(self, answers: dict[str, str]):
        self.answers = answers
        self.calls: list[tuple[list[str], int]] = []

    def generate(self, prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=256, seed=0):
        self.calls.append((list(prompts), seed))
        out = []
        for p in prompts:
            ref = next(a for q, a in self.answers.items() if q in p)
            out.append([GenerationOutput(f"so \\boxed{{{ref}}}" if j % 2 == 0 else "I think 12345", 7, "stop")
                        for j in range(n)])
        return out


def fake_factory(made: list):
    def make():
        g = FakeGenerator({p["problem"]: p["answer"] for p in PROBLEMS})
        made.append(g)
        return g

    return make


# ------------------------------------------------------------------------------------------ grading


@pytest.mark.parametrize(
    "response,reference,extracted,correct",
    [
        ("48 + 24 = 72, so the answer is \\boxed{72}.", "72", "72", True),
        ("She makes 9 * 2 = $18 every day.", "18", "18", True),  # last-number fallback
        ("\\boxed{\\frac{1}{2}}", "0.5", "\\frac{1}{2}", True),
        ("Thus \\boxed{27.0}", "27", "27.0", True),
        ("First \\boxed{3}, no wait: \\boxed{4}", "3", "4", False),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)",
         "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("I do not know.", "5", None, False),
        ("The total is 1,000 apples", "1000", "1,000", True),
        ("x = \\boxed{-3}", "3", "-3", False),
    ],
)
def test_grading_agrees_with_hand_labels(response, reference, extracted, correct):
    [line] = grade_outputs({"id": "p", "answer": reference}, [GenerationOutput(response, 5, "stop")], 0.1,
                           EvalSettings())
    assert line["extracted_answer"] == extracted
    assert line["correct"] is correct


def test_grading_without_fallback_needs_a_box():
    [line] = grade_outputs({"id": "p", "answer": "18"}, [GenerationOutput("it is 18", 3, "stop")], 0.0,
                           EvalSettings(fallback_last_number=False))
    assert line["extracted_answer"] is None and not line["correct"]


def test_grading_statement_switch():
    response = [GenerationOutput("The answer is 18 dollars. Each of the 3 friends pays 6.", 9, "stop")]
    [line] = grade_outputs({"id": "p", "answer": "18"}, response, 0.0, EvalSettings())
    assert (line["extracted_answer"], line["answer_kind"], line["correct"]) == ("18", "statement", True)
    [line] = grade_outputs({"id": "p", "answer": "18"}, response, 0.0, EvalSettings(answer_statement=False))
    assert (line["extracted_answer"], line["answer_kind"], line["correct"]) == ("6", "last_number", False)


def test_a_folder_from_before_the_statement_setting_reads_as_without_it(tmp_path):
    from oar.evaluation.benchmark import check_config

    path = tmp_path / "eval_config.json"
    path.write_text(json.dumps({"n": 1, "fallback_last_number": True}))  # written before the setting existed
    check_config(path, {"n": 1, "fallback_last_number": True, "answer_statement": False})
    with pytest.raises(EvalConfigMismatch, match="answer_statement"):
        check_config(path, {"n": 1, "fallback_last_number": True, "answer_statement": True})


# ------------------------------------------------------------------------------------------ summary


def test_summary_pass_at_k_and_counts():
    def s(correct, answer="1", kind="boxed", reason="stop"):
        return {"correct": correct, "extracted_answer": answer, "answer_kind": kind, "num_tokens": 10,
                "finish_reason": reason, "wall_s": 0.5}

    samples = {
        "a": [s(True), s(False), s(False), s(False, None, None, "length")],
        "b": [s(False), s(False), s(False, "3", "last_number"), s(False)],
    }
    out = summarize(samples, 4, n_boot=200)
    assert out["pass@1"] == pytest.approx(0.125)
    assert out["pass_at_k"] == {"1": pytest.approx(0.125), "2": pytest.approx(0.25), "4": pytest.approx(0.5)}
    assert out["unparsable"] == 1 and out["truncated"] == 1 and out["undecided"] == 0
    samples["b"][0]["undecided"] = True  # the grader's symbolic check timed out twice
    assert summarize(samples, 4, n_boot=200)["undecided"] == 1
    assert out["answer_kinds"] == {"boxed": 6, "none": 1, "last_number": 1}
    assert out["tokens_generated"] == 80 and out["tokens_per_s"] == pytest.approx(20.0)
    assert 0.0 <= out["pass@1_ci95"][0] <= 0.125 <= out["pass@1_ci95"][1] <= 0.25
    assert k_values(16) == [1, 2, 4, 8, 16] and k_values(6) == [1, 2, 4, 6]


# ----------------------------------------------------------------------------------- resumability


def test_run_generation_writes_samples_and_resumes_after_a_kill(tmp_path):
    settings = EvalSettings(n=2, temperature=0.7, top_p=0.9, max_new_tokens=8, chunk_size=1)
    made: list = []
    samples, stats = run_generation(PROBLEMS, tmp_path, fake_factory(made), settings, progress=False)
    assert stats.generated_problems == 4 and len(made) == 1
    lines = (tmp_path / SAMPLES_FILE).read_text().splitlines()
    assert len(lines) == 8
    first = json.loads(lines[0])
    assert set(first) >= {"problem_id", "sample_index", "response", "extracted_answer", "correct"}
    assert [s["correct"] for s in samples["t/2"]] == [True, False]
    seeds = [seed for _, seed in made[0].calls]
    assert seeds == [chunk_seed(0, c) for c in range(4)]

    # simulate a kill: problem t/3 lost, t/2 has one complete line and half a line
    keep = lines[:5] + [lines[5][:20]]
    (tmp_path / SAMPLES_FILE).write_text("\n".join(keep))
    made2: list = []
    samples2, stats2 = run_generation(PROBLEMS, tmp_path, fake_factory(made2), settings, progress=False)
    assert stats2.resumed_problems == 2 and stats2.generated_problems == 2
    assert [seed for _, seed in made2[0].calls] == [chunk_seed(0, 2), chunk_seed(0, 3)]
    def strip(x):
        return {k: [{f: v for f, v in line.items() if f != "wall_s"} for line in lines] for k, lines in x.items()}

    assert strip(samples2) == strip(samples)
    assert len((tmp_path / SAMPLES_FILE).read_text().splitlines()) == 8

    # all done: no generator is made
    made3: list = []
    run_generation(PROBLEMS, tmp_path, fake_factory(made3), settings, progress=False)
    assert made3 == []

    # other settings in the same folder: refused
    with pytest.raises(EvalConfigMismatch, match="max_new_tokens"):
        run_generation(PROBLEMS, tmp_path, fake_factory([]), EvalSettings(n=2, temperature=0.7, top_p=0.9,
                                                                          max_new_tokens=9), progress=False)

    # told the samples are stale (the workflow, after a retrain): all of them generated again
    made4: list = []
    other = EvalSettings(n=2, temperature=0.7, top_p=0.9, max_new_tokens=9)
    _, stats4 = run_generation(PROBLEMS, tmp_path, fake_factory(made4), other, progress=False, replace_stale=True)
    assert stats4.resumed_problems == 0 and stats4.generated_problems == len(PROBLEMS)
    assert len((tmp_path / SAMPLES_FILE).read_text().splitlines()) == 2 * len(PROBLEMS)
    assert '"max_new_tokens": 9' in (tmp_path / CONFIG_FILE).read_text()


def test_read_samples_rejects_corruption_in_the_middle(tmp_path):
    path = tmp_path / SAMPLES_FILE
    path.write_text('{"problem_id": "a", "sample_index": 0}\nGARBAGE\n{"problem_id": "b", "sample_index": 0}\n')
    with pytest.raises(ValueError, match=r":2: malformed sample line"):
        read_samples(path, 1)


# ------------------------------------------------------------------------------------- generation


def test_transformers_generator_batches_and_seeds(tiny_model_dir):
    gen = make_generator("transformers", tiny_model_dir, batch_size=3)
    assert isinstance(gen, TransformersGenerator) and gen.tokenizer.padding_side == "left"
    prompts = ["What is 1+1?", "A much longer question about apples, pears and oranges?"]
    a = gen.generate(prompts, n=2, temperature=1.0, top_p=0.95, max_new_tokens=6, seed=1)
    b = gen.generate(prompts, n=2, temperature=1.0, top_p=0.95, max_new_tokens=6, seed=1)
    c = gen.generate(prompts, n=2, temperature=1.0, top_p=0.95, max_new_tokens=6, seed=2)
    assert a == b != c
    assert [len(x) for x in a] == [2, 2]
    for outs in a:
        for o in outs:
            assert 1 <= o.num_tokens <= 6 and o.finish_reason in ("stop", "length")
            assert o.finish_reason == "stop" or o.num_tokens == 6
    greedy = gen.generate(prompts, n=3, temperature=0.0, max_new_tokens=5)
    assert all(len({o.text for o in outs}) == 1 and len(outs) == 3 for outs in greedy)
    # left padding: a prompt's greedy continuation does not depend on its batch mates
    alone = gen.generate(prompts[:1], n=1, temperature=0.0, max_new_tokens=5)
    assert alone[0][0].text == greedy[0][0].text


def test_transformers_generator_decodes_without_cudnn_attention(tiny_model_dir):
    """Every decoding forward of the transformers backend runs with cuDNN's attention kernel disabled (it
    would build a graph for every key length: oar.sdpa_kernels); torch's choice is back afterwards."""
    gen = make_generator("transformers", tiny_model_dir, batch_size=2)
    seen = []
    handle = gen.model.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    try:
        gen.generate(["What is 1+1?"], n=2, temperature=1.0, max_new_tokens=4, seed=0)
    finally:
        handle.remove()
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_unknown_backend_is_an_error(tiny_model_dir):
    with pytest.raises(ValueError, match="backend"):
        make_generator("onnx", tiny_model_dir)


# ---------------------------------------------------------------------------------- evaluate script


def test_evaluate_script_end_to_end_and_summary_regeneration(tiny_model_dir, tmp_path, monkeypatch):
    bench = tmp_path / "gsm8k_test.jsonl"
    bench.write_text("".join(json.dumps({**p, "source": "t", "level": None}) + "\n" for p in PROBLEMS))
    out = tmp_path / "eval"
    evaluate = load_script("evaluate")
    argv = ["--model", str(tiny_model_dir), "--benchmark-file", str(bench), "--out-dir", str(out),
            "--limit", "3", "--max-new-tokens", "8", "--batch-size", "4", "--quiet"]
    summary = evaluate.main(argv)
    assert sorted(p.name for p in out.iterdir()) == [CONFIG_FILE, SAMPLES_FILE, "summary.json"]
    lines = [json.loads(x) for x in (out / SAMPLES_FILE).read_text().splitlines()]
    assert [(x["problem_id"], x["sample_index"]) for x in lines] == [("t/0", 0), ("t/1", 0), ("t/2", 0)]
    assert summary["n"] == 1 and summary["temperature"] == 0.0  # GSM8K: greedy
    assert summary["num_problems"] == 3 and summary["num_samples"] == 3
    assert summary["tokens_generated"] == sum(x["num_tokens"] for x in lines) > 0
    assert summary["this_run"]["generated_problems"] == 3
    prov = summary["provenance"]
    assert prov["seed"] == 0 and prov["git"]["commit"] and prov["packages"]["torch"]
    assert prov["inputs"]["benchmark_file"]["sha256"] and prov["args"]["limit"] == 3

    # delete the summary: the rerun rebuilds it from the samples without loading a model
    (out / "summary.json").unlink()

    def no_model(*a, **k):
        raise AssertionError("a rerun with complete samples must not generate")

    monkeypatch.setattr(evaluate, "make_generator", no_model)
    again = evaluate.main(argv)
    assert again["this_run"]["generated_problems"] == 0 and again["this_run"]["resumed_problems"] == 3
    for key in ("pass@1", "pass@1_ci95", "pass_at_k", "tokens_generated", "unparsable", "generation_wall_s"):
        assert again[key] == summary[key]


def test_evaluate_defaults_follow_the_benchmark(tmp_path):
    evaluate = load_script("evaluate")
    base = ["--model", "m", "--out-dir", str(tmp_path)]
    a = evaluate.parse_args(base + ["--benchmark-file", "results/data/aime24.jsonl"])
    assert (a.n, a.temperature, a.top_p) == (16, 0.6, 0.95)
    m = evaluate.parse_args(base + ["--benchmark-file", "results/data/math500.jsonl"])
    assert (m.n, m.temperature, m.top_p) == (1, 0.0, 1.0)
    g = evaluate.parse_args(base + ["--benchmark-file", "x/gsm8k_test.jsonl", "--n", "4"])
    assert (g.n, g.temperature, g.top_p) == (4, 0.6, 0.95)
    assert a.chunk_size == 1 and g.chunk_size == 2


class _VLLMStarted(Exception):
    pass


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in for the `vllm` module (it needs a GPU): records what `LLM(...)` is given, then stops."""
    import sys
    import types

    seen: dict = {}

    def llm(**kwargs):
        seen.update(kwargs)
        raise _VLLMStarted

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=llm))
    return seen


@pytest.mark.parametrize("extra, expected", [
    ([], {"gpu_memory_utilization": 0.5, "enforce_eager": False}),  # safe default, not vLLM's 0.9
    (["--gpu-memory-utilization", "0.3", "--enforce-eager"], {"gpu_memory_utilization": 0.3, "enforce_eager": True}),
    (["--max-model-len", "4096"], {"max_model_len": 4096}),
])
def test_evaluate_passes_vllm_memory_options_to_vllm(tiny_model_dir, tmp_path, fake_vllm, extra, expected):
    bench = tmp_path / "gsm8k_test.jsonl"
    bench.write_text("".join(json.dumps({**p, "source": "t", "level": None}) + "\n" for p in PROBLEMS))
    evaluate = load_script("evaluate")
    argv = ["--model", str(tiny_model_dir), "--benchmark-file", str(bench), "--out-dir", str(tmp_path / "eval"),
            "--backend", "vllm", "--quiet", *extra]
    with pytest.raises(_VLLMStarted):
        evaluate.main(argv)
    assert {k: fake_vllm[k] for k in expected} == expected
    assert fake_vllm["model"] == str(tiny_model_dir)


def test_vllm_memory_share_out_of_range_is_an_error(tmp_path, capsys):
    evaluate = load_script("evaluate")
    with pytest.raises(SystemExit):
        evaluate.parse_args(["--model", "m", "--benchmark-file", "b.jsonl", "--out-dir", str(tmp_path),
                             "--gpu-memory-utilization", "1.5"])
    assert "--gpu-memory-utilization must be in (0, 1]" in capsys.readouterr().err
