"""The step balance (oar.method.steps): each reasoning step's share of the gate's weight held to its share of
the tokens, steps split by the response's own delimiters; worked by hand. Its setting in the run's oar block
and OARConfig, its method oar_g_steps, the mediator it is judged by, and the early stop on a delimiter that
splits no response."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
import yaml

from oar.method.steps import (MATHS_DELIMITER, balance_steps, count_steps, delimiter_problem, per_token_ratio,
                              step_cuts, token_steps)

CHAIN = r"\.\s"  # the chain task's steps: its sentences


def test_tokens_are_placed_in_steps_by_their_last_character():
    """'1 + 2 = 3. Note: owl. 3 * 2 = 6.' split by '\\.\\s': the cuts are where ' Note' and ' 3' begin plus one
    (after each '. '), 11 and 22; a token ending inside a delimiter closes the step before it."""
    text = "1 + 2 = 3. Note: owl. 3 * 2 = 6."
    assert step_cuts(text, CHAIN) == [11, 22]  # the last '.' ends the text: it starts no step
    # tokens: "1" " +" " 2" " =" " 3" "." " Note" ":" " owl" ". " "3" " *" " 2" " =" " 6" "."
    ends = [1, 3, 5, 7, 9, 10, 15, 16, 20, 22, 23, 25, 27, 29, 31, 32]
    # " Note" (10-15) ends after the cut at 11: step 1; ". " (20-22) ends on the space at 21, before 22: step 1
    assert token_steps(text, ends, CHAIN) == (0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2)
    assert count_steps(text, CHAIN) == 3
    assert count_steps(text, MATHS_DELIMITER) == 1  # no blank line: one step
    assert count_steps("Step one.\n\nStep two.\n\n", MATHS_DELIMITER) == 2


def test_each_step_is_held_to_its_token_share_and_the_mass_is_kept():
    """Row 0: six reasoning tokens in steps [0, 0, 1, 1, 1, 2] with gate weights [0.6, 0.2, 0.4, 0.4, 0.4, 4.0]
    (sum 6 = R). Step 0 sums 0.8 over 2 tokens (x 2.5): [1.5, 0.5]; step 1 sums 1.2 over 3 (x 2.5): [1, 1, 1];
    the last step 4.0 over 1 (x 0.25): [1]. The sum stays 6; the answer position (1.0) and padding (0) are
    untouched. Row 1 is one step (unchanged), row 2 has no steps attached (unchanged)."""
    weights = torch.tensor([[0.6, 0.2, 0.4, 0.4, 0.4, 4.0, 1.0, 0.0],
                            [0.5, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
                            [0.5, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[True] * 6 + [False] * 2, [True] * 6 + [False] * 2, [True] * 6 + [False] * 2])
    out = balance_steps(weights, mask, [(0, 0, 1, 1, 1, 2), (0, 0, 0, 0, 0, 0), None])
    assert out[0].tolist() == pytest.approx([1.5, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], abs=1e-7)
    assert torch.equal(out[1:], weights[1:])
    assert out[0, :6].sum().item() == pytest.approx(6.0, abs=1e-6)
    assert out.dtype == weights.dtype
    # idempotent: a balanced row is balanced already
    assert torch.allclose(balance_steps(out, mask, [(0, 0, 1, 1, 1, 2), None, None]), out)
    # the within-step ranking is the gate's: the first token stays three times the second
    assert out[0, 0].item() == pytest.approx(3 * out[0, 1].item())


def test_the_mass_is_exact_in_float64_on_random_rows():
    torch.manual_seed(0)
    weights = torch.rand(4, 30, dtype=torch.float64) + 0.1
    mask = torch.ones(4, 30, dtype=torch.bool)
    steps = [tuple(sorted(torch.randint(0, 5, (30,)).tolist())) for _ in range(4)]
    out = balance_steps(weights, mask, steps)
    assert torch.allclose(out.sum(dim=1), weights.sum(dim=1), rtol=0, atol=1e-12)
    for row, labels in zip(out, steps):
        labels = torch.tensor(labels)
        for k in labels.unique():
            share = row[labels == k].sum() / row.sum()
            assert share.item() == pytest.approx((labels == k).double().mean().item(), rel=1e-12)


def test_bad_step_labels_stop_naming_the_row():
    weights, mask = torch.ones(1, 4), torch.tensor([[True, True, True, False]])
    with pytest.raises(ValueError, match="row 0: 2 step labels for 3 reasoning positions"):
        balance_steps(weights, mask, [(0, 1)])


@pytest.mark.parametrize("value, problem", [("", "non-empty regular expression"), ("(", "must be a regular expression"),
                                            ("x*", "must not match the empty text"), (3, "non-empty regular")])
def test_a_bad_delimiter_is_refused(value, problem):
    assert problem in delimiter_problem(value)


def test_good_delimiters_pass():
    assert delimiter_problem(MATHS_DELIMITER) is None and delimiter_problem(CHAIN) is None


def test_the_mediator_is_weight_per_last_step_token_over_weight_per_earlier_step_token():
    """OAR-G on the shipped chain_d8 (the rescue's mediator table): 4.5% of the weight on the last step's 2.3%
    of decisive tokens, 9.8% on the earlier steps' 9.1%: (4.5 / 2.3) / (9.8 / 9.1) = 1.9565 / 1.0769 = 1.82."""
    assert per_token_ratio(0.045, 0.023, 0.098, 0.091) == pytest.approx(1.8168, abs=1e-4)
    assert per_token_ratio(0.023, 0.023, 0.091, 0.091) == 1.0  # uniform weights
    assert math.isnan(per_token_ratio(0.1, 0.0, 0.1, 0.1)) and math.isnan(per_token_ratio(math.nan, 0.1, 0.1, 0.1))


def test_the_setting_and_its_delimiter_live_in_the_oar_block_and_in_oarconfig():
    from oar.training.settings import OARSettings, SettingsError, fingerprinted, resolve_settings

    assert OARSettings().step_balance is False and OARSettings().step_delimiter == "\n\n"
    with pytest.raises(SettingsError, match=r"^settings key 'oar.step_delimiter' must not match the empty text"):
        OARSettings(step_delimiter=r"\s*")
    # added settings: runs made before them keep their fingerprints
    base = {"run_id": "r", "model": "m", "train_file": "f"}
    assert "step_balance" not in fingerprinted(resolve_settings(base))["oar"]
    assert fingerprinted(resolve_settings({**base, "oar": {"step_balance": True}}))["oar"]["step_balance"] is True


def test_oarconfig_takes_the_option_and_names_a_bad_delimiter(tmp_path):
    from oar.training.grpo_trainer import OARConfig
    from oar.training.settings import SettingsError

    args = OARConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", oar_step_balance=True,
                     oar_step_delimiter=CHAIN)
    assert args.oar_settings().step_balance and args.oar_settings().step_delimiter == CHAIN
    with pytest.raises(SettingsError, match=r"^OARConfig field 'oar_step_delimiter' must be a regular expression"):
        OARConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", oar_step_delimiter="(")


def test_the_method_oar_g_steps_is_oar_g_step_balanced_and_reads_no_ground_truth():
    from oar.method import names
    from oar.method.weight_transforms import transform_spec

    spec = transform_spec("oar_g_steps")
    assert spec.scorer == "oar_g" and spec.reads == frozenset({"steps"}) and not spec.reads_parsed_steps
    assert names.reads_steps("oar_g_steps") and not names.reads_parsed_steps("oar_g_steps")
    assert names.STEP_BALANCED == {"oar_g_steps": "oar_g"} and "oar_g_steps" not in names.READS_PARSED_STEPS
    weights = torch.tensor([[0.6, 0.2, 0.4, 0.4, 0.4, 4.0]])
    mask = torch.ones(1, 6, dtype=torch.bool)
    probes = [SimpleNamespace(steps=(0, 0, 1, 1, 1, 2))]
    out = spec.transform(weights, mask, probes, SimpleNamespace(step_delimiter=CHAIN))
    assert out[0].tolist() == pytest.approx([1.5, 0.5, 1.0, 1.0, 1.0, 1.0], abs=1e-7)


# ------------------------------------------------------------------ the workflow's check before any job


def _chain_config(**oar):
    from pathlib import Path

    from oar.experiment.runs import deep_merge

    root = Path(__file__).resolve().parents[1]
    cfg = deep_merge(yaml.safe_load((root / "config/studies/decisive.yaml").read_text()),
                     yaml.safe_load((root / "config/studies/step-balance.yaml").read_text()))
    cfg = copy.deepcopy(cfg)
    cfg["training"]["oar"].update(oar)
    return cfg


def _registry(cfg):
    from pathlib import Path

    from snakemake.utils import validate

    from oar.experiment.runs import Registry

    schema = Path(__file__).resolve().parents[1] / "config" / "schema.yaml"
    validate(cfg, str(schema))
    return Registry(cfg, tuple(yaml.safe_load(schema.read_text())["$defs"]["trainer"]["properties"]))


def test_a_delimiter_that_splits_no_reference_solution_stops_the_config_naming_the_key():
    """The study's chain_d8 with the maths default (a blank line): the chain task's reference solutions are
    one line each, so the step balance would change nothing; the config stops naming the key."""
    from oar.experiment.config_error import ConfigError

    _registry(_chain_config())  # the study's own delimiter passes
    with pytest.raises(ConfigError, match=r"^config error at training.oar.step_delimiter: '\\n\\n' splits none of "
                                          r"the chain task's 8 reference solutions"):
        _registry(_chain_config(step_delimiter="\n\n"))


def test_the_mechanism_tables_mediator_gives_each_arms_per_token_ratio():
    """Two arms, two seeds each: OAR-G with 4.5% of the weight on the last step's 2.3% of decisive tokens and
    9.8% on the earlier steps' 9.1% (ratio 1.8168 by hand, above); the step balance with 3.15% and 8.6% of the
    same tokens ((3.15 / 2.3) / (8.6 / 9.1) = 1.3696 / 0.94505 = 1.4492). The table prints the ratio per arm."""
    import pandas as pd

    from oar.analysis import mechanism

    shares = {"oar_g": (0.045, 0.098), "oar_g_steps": (0.0315, 0.086)}
    outcomes = pd.DataFrame([{"run": f"{m}-{s}", "model": "chain_d8", "method": m, "seed": s, "final_accuracy": 0.6,
                              "final_step_weight_share": f, "early_steps_weight_share": e,
                              "final_step_token_share": 0.023, "early_steps_token_share": 0.091}
                             for m, (f, e) in shares.items() for s in (1, 2)])
    design = {"model": "chain_d8", "contrasts": [{"name": "c", "plus": ["oar_g_steps"], "minus": ["oar_g"],
                                                  "test": "greater"}]}
    weights = mechanism.mediator(outcomes, design, [1, 2]).set_index("method")
    assert weights.loc["oar_g", "final_to_early_ratio"] == pytest.approx(1.8168, abs=1e-4)
    assert weights.loc["oar_g_steps", "final_to_early_ratio"] == pytest.approx(1.4492, abs=1e-4)
    md = mechanism._mediator_section(weights.reset_index())
    assert "last-step over earlier-step weight per decisive token" in md and "| oar_g_steps | 2 | 3.1 " in md
    assert "| 1.45 [1.45, 1.45] |" in md
