"""OARConfig declares every OARSettings field statically (a type checker sees it), generated from
OARSettings into grpo_trainer.py and docs/library.md, and neither may go stale."""

from __future__ import annotations

import dataclasses

import pytest

from oar.method.scorer_config import integer, setting, text
from oar.training import config_fields
from oar.training.grpo_trainer import OARConfig
from oar.training.settings import OARSettings

pytestmark = pytest.mark.quick

REGENERATE = f"stale: run `{config_fields.COMMAND}` and commit grpo_trainer.py and docs/library.md"


def test_the_committed_declarations_and_table_are_generated_from_oarsettings():
    trainer = config_fields.TRAINER.read_text(encoding="utf-8")
    assert config_fields.update(trainer, config_fields.block(), config_fields.BLOCK_BEGIN,
                                config_fields.BLOCK_END) == trainer, REGENERATE
    page = config_fields.LIBRARY_PAGE.read_text(encoding="utf-8")
    assert config_fields.update(page, config_fields.table(), config_fields.TABLE_BEGIN,
                                config_fields.TABLE_END) == page, REGENERATE
    assert config_fields.main(["--check"]) == 0


def test_oarconfig_has_every_setting_with_its_type_default_and_help_after_its_own_fields():
    declared = [f for f in dataclasses.fields(OARConfig) if f.name.startswith("oar_")]
    settings = dataclasses.fields(OARSettings)
    assert [f.name for f in declared] == ["oar_method", "oar_top_fraction", "oar_telemetry",
                                          *(f"oar_{s.name}" for s in settings)]
    for f, s in zip(declared[3:], settings, strict=True):
        assert (config_fields.declared_type(OARConfig, f.name), f.default, f.metadata["help"]) == (
            s.type, s.default, s.metadata["help"]), f.name
    assert config_fields.stale_declarations(OARConfig) == []
    # every oar_ field is a row of the docs table
    assert all(f"| `{f.name}` |" in config_fields.table() for f in declared)


def test_trls_parser_reads_the_fields_with_their_help():
    from trl import TrlParser

    parser = TrlParser([OARConfig])
    (config,) = parser.parse_args_into_dataclasses(["--output_dir", "out", "--use_cpu", "--oar_tau", "0.3",
                                                    "--oar_probe", "as_joint", "--oar_method", "oar_g"])
    assert (config.oar_tau, config.oar_probe, config.oar_settings().tau) == (0.3, "as_joint", 0.3)
    assert "fraction of reasoning tokens in the suppression band" in parser.format_help()


@dataclasses.dataclass(frozen=True)
class _Settings:
    """A settings class with one short and one long setting, to generate declarations of."""

    budget: int = setting(3, "a short help", integer(1))
    label: str = setting("a \"quoted\" \\ label", "a long help " + "that goes on and on, " * 12 + "then ends", text)


def test_a_generated_declaration_is_the_setting_it_came_from_within_the_line_length():
    body = "\n".join(config_fields.declaration(f) for f in dataclasses.fields(_Settings))
    assert max(len(line) for line in body.splitlines()) <= config_fields.WIDTH
    namespace: dict = {}
    exec("from __future__ import annotations\nfrom dataclasses import dataclass, field\n"
         f"@dataclass\nclass Config:\n{body}\n", namespace)
    generated = {f.name: f for f in dataclasses.fields(namespace["Config"])}
    for f in dataclasses.fields(_Settings):
        made = generated[f"oar_{f.name}"]
        assert (made.type, made.default, made.metadata["help"]) == (f.type, f.default, f.metadata["help"])


def test_a_setting_missing_from_the_declarations_is_named():
    kept = [(f.name, config_fields.declared_type(OARConfig, f.name), dataclasses.field(default=f.default,
                                                                                        metadata=f.metadata))
            for f in dataclasses.fields(OARConfig) if f.name.startswith("oar_") and f.name != "oar_beta"]
    partial = dataclasses.make_dataclass("Partial", kept)
    assert config_fields.stale_declarations(partial) == ["oar_beta is not declared"]
