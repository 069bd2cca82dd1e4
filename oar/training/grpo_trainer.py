"""GRPO with outcome-grounded token advantages: a narrow subclass of TRL's ``GRPOTrainer``.

GRPO gives every token of response i the advantage A_i. ``OARTrainer`` scores the reasoning tokens of
each response with a scorer from ``oar.method.importance``, gates the scores into weights with
``oar.method.gate.gate`` and hands TRL token advantages ``A_{i,t} = w_{i,t} * A_i`` [B, T]. Nothing else of
GRPO changes (sampling, rewards, loss, optimiser). Two facts of TRL 1.16 make this one override:

- ``_compute_loss`` accepts advantages of shape [B, T] ("to support subclasses");
- every [B, T] tensor returned by ``_generate_and_score_completions`` travels with its rows through
  TRL's shuffle and split into micro-batches, and the buffered batch is reused across iterations, so
  the weights are computed once per generation batch and never touched in ``compute_loss``.

Method ``grpo`` leaves TRL's scalar advantages untouched (exactly stock GRPO).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id

from oar.data import chains
from oar.grading.grader import grade
from oar.method.gate import gate, token_advantages
from oar.method.importance import Scores, score
from oar.method.metrics import STEP_CREDIT, ess_ratio, step_credit_shares, top_mass
from oar.method.names import reads_parsed_steps, scorer_of
from oar.method.probes import Probe, ProbeOptions, token_char_spans
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import ScorerSpec, scorer_spec
from oar.method.weight_transforms import WeightTransform, transform_spec
from oar.sdpa_kernels import without_cudnn_attention
from oar.training.collective import gathered_for_scoring
from oar.training.fallback_warning import FallbackWarning
from oar.training.memory import PeakMemory
from oar.training.model_card import write_model_card
from oar.training.rank_metrics import over_ranks, ratio
from oar.training.scorer_checks import all_zero, check_on_made_up_batch
from oar.training.settings import OARSettings, SettingsError, check_method
from oar.training.vllm_cpu import install_cpu_weight_sync


logger = logging.getLogger(__name__)

_OAR_SETTINGS = {setting.name: setting for setting in fields(OARSettings)}
# What OARConfig trains when oar_method is not given: the paper's OAR-G (method.md section 5). GRPO is
# oar_method="grpo"; the workflow names every run's method, so its runs never read this default.
DEFAULT_METHOD = "oar_g"


def _oar_fields(cls: type) -> type:
    """Class decorator, applied before ``@dataclass``: an ``oar_<name>`` field for every ``OARSettings``
    field, with its default, type and help (TRL's argument parser shows it), after the class's own."""
    annotations = cls.__dict__.get("__annotations__", {})
    for name, setting in _OAR_SETTINGS.items():
        annotations[f"oar_{name}"] = setting.type
        setattr(cls, f"oar_{name}", field(default=setting.default, metadata={"help": setting.metadata["help"]}))
    cls.__annotations__ = annotations
    return cls


@dataclass
@_oar_fields
class OARConfig(GRPOConfig):
    """``GRPOConfig`` plus the OAR settings: the method, and the run's ``oar`` block as ``oar_<key>`` fields
    (``oar_tau``, ``oar_beta``, ``oar_probe``, ``oar_chunk_tokens``, ...; plain values, so the config
    serialises as TRL's does), one per ``oar.training.settings.OARSettings`` field with its default and
    check. ``oar_method`` is ``grpo``, a registered scorer's name, an import path ``package.module:function``
    of a scorer, or an intervention (``oar.method.names``); left out, it is the paper's OAR-G (``oar_g``).
    A bad value stops the construction with a ``SettingsError`` naming the field (``oar_tau``)."""

    oar_method: str = field(default=DEFAULT_METHOD, metadata={"help": "oar_g (the default, the paper's OAR-G), grpo "
                                                                      "(stock GRPO), another registered scorer (oar_p, "
                                                                      "...), an import path package.module:function, "
                                                                      "or an intervention"})
    oar_top_fraction: float = field(default=0.1, metadata={"help": "fraction of tokens for the top-mass metric"})
    oar_telemetry: bool = field(default=False, metadata={
        "help": "let TRL send its usage telemetry (huggingface_hub's send_telemetry); off unless set"})

    def __post_init__(self):
        super().__post_init__()
        check_method(self.oar_method, named="OARConfig field 'oar_method'")
        try:
            self.oar_settings()  # the oar block's checks
        except SettingsError as error:
            if error.setting is None:
                raise
            # named as the user typed it here (the settings file's "oar.tau" is this class's "oar_tau")
            raise SettingsError(f"OARConfig field 'oar_{error.setting}' {error.problem}", setting=error.setting,
                                problem=error.problem) from None

    def oar_settings(self) -> OARSettings:
        """The ``oar_*`` fields as the run's ``oar`` block."""
        return OARSettings(**{name: getattr(self, f"oar_{name}") for name in _OAR_SETTINGS})

    @staticmethod
    def oar_fields(settings: OARSettings) -> dict[str, Any]:
        """A run's ``oar`` block as OARConfig's ``oar_*`` arguments, each of its field's type."""
        return {f"oar_{name}": value for name, value in asdict(settings.typed()).items()}


def with_decisive_tokens(tokenizer, probe: Probe) -> Probe:
    """``probe`` with the positions of its decisive reasoning tokens and of those that cannot change the
    answer, parsed from the reasoning's text by the chain task's grammar (``oar.data.chains``); what the
    truth scorers read."""
    text, starts, ends = token_char_spans(tokenizer, probe.response_ids[: probe.reasoning_len])
    return replace(probe, decisive=tuple(chains.decisive_tokens(text, starts, ends)),
                   final_step=tuple(chains.final_step_tokens(text, starts, ends)),
                   irrelevant=tuple(chains.irrelevant_tokens(text, starts, ends)))


def correctness_reward(fallback_last_number: bool = True, timeout_s: float = 5.0, answer_statement: bool = True):
    """Reward 1 when the graded final answer equals the dataset's ``answer`` column, else 0.

    A grade the symbolic check left undecided (it timed out twice, ``oar.grading.grader.Grade.undecided``)
    is rewarded 0 and counted in the function's ``undecided`` attribute, which `OARTrainer` logs as
    ``grading/undecided`` and resets every generation batch."""

    def correctness(completions, answer, **kwargs) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        grades = [grade(text, reference, fallback_last_number=fallback_last_number, timeout_s=timeout_s,
                        answer_statement=answer_statement)
                  for text, reference in zip(texts, answer, strict=True)]
        correctness.undecided += sum(g.undecided for g in grades)
        return [float(g.correct) for g in grades]

    correctness.undecided = 0
    return correctness


def scoring_seed(seed: int, step: int, process_index: int) -> int:
    """The seed of one scoring call: fresh every step, reproducible per run, and each process its own (the
    processes score different rows; one seed on all would give them the same noise). Process 0 draws what
    a one-process run draws. torch's CPU generator keeps a seed's low 32 bits, so the processes are 2^20
    apart there: distinct for runs of fewer than 2^20 steps and up to 2^12 processes."""
    return seed * 1_000_003 + step + process_index * (1 << 20)


@dataclass(frozen=True)
class MethodSetup:
    """What a run's method resolves to, once a run (what changes per step travels with each call).

    ``settings`` is the run's ``oar`` block, ``scorer`` the spec of the scorer whose scores the method
    gates (None for GRPO), ``transform`` the intervention that changes the gated weights (None for a
    plain scorer), ``probe_options`` how the responses are read into probes and ``parsed_steps`` whether
    the probes carry the chain task's parsed positions (the method reads them, or step credit is logged)."""

    method: str
    settings: OARSettings
    scorer: ScorerSpec | None
    scorer_config: ScorerConfig
    transform: WeightTransform | None
    probe_options: ProbeOptions
    parsed_steps: bool

    @classmethod
    def of(cls, method: str, settings: OARSettings) -> MethodSetup:
        scorer = scorer_of(method)
        return cls(method=method, settings=settings, scorer=scorer_spec(scorer) if scorer is not None else None,
                   scorer_config=settings.scorer_config(), transform=transform_spec(method),
                   probe_options=ProbeOptions.of(settings),
                   parsed_steps=reads_parsed_steps(method) or settings.log_step_credit)

    @property
    def gated(self) -> bool:
        """Whether the method's weights come from the gate (every method but GRPO)."""
        return self.scorer is not None

    @property
    def needs_probes(self) -> bool:
        return self.gated or self.settings.log_step_credit


def method_line(setup: MethodSetup) -> str:
    """What a run trains, in words: the trainer's line at construction."""
    if not setup.gated:
        return f"{setup.method!r}: GRPO's advantages, unchanged (stock GRPOTrainer)"
    settings, spec = setup.settings, setup.scorer
    scorer = f"scorer {spec.name!r}" + (f" ({spec.description})" if spec.description else "")
    changed = f", then intervention {setup.method!r}" if setup.transform is not None else ""
    return (f"{setup.method!r}: token advantages from {scorer} through the gate (tau {settings.tau}, beta "
            f"{settings.beta}, floor {settings.floor}){changed}")


def gated_weights(scores: Scores, probes: list[Probe], setup: MethodSetup) -> torch.Tensor:
    """The bi-level gate's weights [B, T] of one call's scores, changed by the method's intervention where it
    has one (``oar.method.weight_transforms``): the trainer's path from scores to weights."""
    settings = setup.settings
    weights = gate(scores.scores, scores.reasoning_mask, settings.tau, settings.beta, settings.floor)
    if setup.transform is not None:
        weights = setup.transform.transform(weights, scores.reasoning_mask, probes, settings)
    return weights


def scoring_counts(scores: Scores | None) -> dict[str, float]:
    """This rank's rows scored, fallen back to LT-Logits (no answer span) and with a non-finite score."""
    if scores is None:  # GRPO scores nothing
        return {"scored": 0.0, "no_answer": 0.0, "nonfinite": 0.0}
    return {"scored": scores.scored.sum().item(), "no_answer": scores.lt_fallback.sum().item(),
            "nonfinite": scores.nonfinite.sum().item()}


def credit_counts(weights: torch.Tensor, advantages: torch.Tensor, completion_mask: torch.Tensor,
                  probes: list[Probe] | None, top_fraction: float, log_step_credit: bool) -> dict[str, float]:
    """Sums of this rank's credit statistics with the number of rows each was summed over.

    ESS and top mass are means over the responses with A != 0 (method.md section 8): undefined without
    one. With ``log_step_credit``, each parsed step's share of the weight (the mechanism's mediator), over
    the same responses (the ones the update moves)."""
    active = advantages != 0
    counts = {}
    for name, values in (("ess", ess_ratio(weights, completion_mask)),
                         ("top_mass", top_mass(token_advantages(weights, advantages), completion_mask,
                                               top_fraction))):
        kept = values[active]
        kept = kept[~torch.isnan(kept)]
        counts[f"{name}_sum"], counts[f"{name}_rows"] = kept.sum().item(), float(kept.numel())
    if log_step_credit:
        shares = step_credit_shares(weights, probes)[active.cpu()]
        for column, name in enumerate(STEP_CREDIT):
            kept = shares[:, column][~torch.isnan(shares[:, column])]
            counts[f"{name}_sum"], counts[f"{name}_rows"] = kept.sum().item(), float(kept.numel())
    return counts


class OARTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are reshaped per token by an importance scorer.

    Built as ``GRPOTrainer`` is, with an :class:`OARConfig` (a ``GRPOConfig`` is refused: it has no
    ``oar_*`` settings); with none, it makes one as ``GRPOTrainer`` does, ``OARConfig("<model name>-OAR")``,
    which trains the paper's OAR-G. ``reference_model`` is the frozen model handed to a scorer that
    declares it reads one (default: TRL's reference model, present when ``beta > 0``). It logs, at info
    level, one line naming the method that trains."""

    args: OARConfig
    _warned_all_zero = False  # all-zero scores are warned of once a run (set on the trainer when warned)

    def __init__(self, *args, reference_model=None, **kwargs):
        # The config is checked before GRPOTrainer reads it (it reads oar_telemetry while it builds itself).
        given = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments
        config = given.get("args")
        if config is None:  # what GRPOTrainer does with none, with OARConfig and OAR's name
            model = given.get("model")
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            config = OARConfig(f"{name.split('/')[-1]}-OAR")
        elif not isinstance(config, OARConfig):
            raise TypeError(f"OARTrainer takes an OARConfig (GRPOConfig plus the oar_* settings), got "
                            f"{type(config).__name__}: build OARConfig(...) with the same arguments")
        given["args"] = config
        given.pop("self")
        super().__init__(**given)
        self._memory = PeakMemory()
        # vLLM's CPU backend cannot take TRL's per-tensor weight sync; see oar.training.vllm_cpu for why and the fix.
        install_cpu_weight_sync(self)
        # The method, its scorer, intervention and settings, once per run (MethodSetup).
        self._setup = MethodSetup.of(self.args.oar_method, self.args.oar_settings())
        self._reference_model = reference_model
        self._rewards = None  # this generation batch's rewards, every process's rows (_calculate_rewards)
        self._fallback_warning = FallbackWarning(self._setup.settings)  # most rows without an answer span
        if self._setup.gated:
            self._check_scorer_inputs()
            # a user's scorer tried now rather than after the first generation (oar.training.scorer_checks)
            if self.is_deepspeed_enabled:
                logger.debug("scorer %r not checked at construction under DeepSpeed", self._setup.scorer.name)
            else:
                check_on_made_up_batch(self._setup.scorer, self.model, self.processing_class,
                                       self._setup.probe_options, self._setup.scorer_config,
                                       reference_model=self._reference_model)
        logger.info("OARTrainer trains %s", method_line(self._setup))

    def _check_scorer_inputs(self) -> None:
        """Stop before training where the scorer reads what this trainer cannot give it."""
        spec, args = self._setup.scorer, self.args
        if spec.reads("groups") and args.per_device_train_batch_size % self.num_generations:
            raise ValueError(f"scorer {spec.name!r} reads each response's group: per_device_train_batch_size "
                             f"({args.per_device_train_batch_size}) must be a multiple of num_generations "
                             f"({self.num_generations}) so that every process holds whole groups")
        if spec.reads("reference_model"):
            if self._reference_model is None and self.ref_model is None:
                raise ValueError(f"scorer {spec.name!r} reads a reference model: pass OARTrainer(reference_model=...) "
                                 "or train with a KL term (beta > 0), whose reference model it then reads")
            if self._reference_model is None:
                self._reference_model = self.accelerator.unwrap_model(self.ref_model)
            else:  # frozen, beside the policy
                self._reference_model = self._reference_model.to(self.accelerator.device).eval().requires_grad_(False)

    def _send_telemetry(self):
        """TRL's usage telemetry: sent only where the user turned it on (``OARConfig.oar_telemetry``)."""
        if self.args.oar_telemetry:
            super()._send_telemetry()

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: str | list[str] | None = None):
        """The model card TRL writes beside every checkpoint (``output_dir/README.md``): OAR's, naming the
        method and its settings, the base model and the paper (``oar.training.model_card``)."""
        if self.is_world_process_zero():
            write_model_card(self, self.args.output_dir, model_name=model_name, dataset_name=dataset_name, tags=tags)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The model, and its card beside it: every checkpoint folder and the final model have one."""
        super().save_model(output_dir, _internal_call)
        if self.is_world_process_zero():
            write_model_card(self, output_dir or self.args.output_dir)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._setup.gated and self._setup.scorer.reads("groups"):
            # what GRPO's advantages are computed from: the weighted sum over reward functions, every process's rows
            weights = self.reward_weights.to(rewards_per_func.device)
            self._rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        return rewards_per_func

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Resuming a multi-process CPU run (gloo): accelerate names each process's device "cpu:0", and
        # transformers passes it to torch.load as map_location when world_size > 1, which torch cannot
        # map storages to ("don't know how to restore data location ... cpu:0"). Plain "cpu" is the same
        # memory; the device is swapped for this load only.
        device = self.args.device
        if checkpoint is None or device.type != "cpu" or device.index is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        self.args.__dict__["_setup_devices"] = torch.device("cpu")  # the cached_property behind args.device
        try:
            return super()._load_optimizer_and_scheduler(checkpoint)
        finally:
            self.args.__dict__["_setup_devices"] = device

    def _take_undecided(self) -> float:
        """Rewards left undecided by the grader since the last call (see `correctness_reward`); resets."""
        total = 0
        for function in self.reward_funcs:
            if hasattr(function, "undecided"):
                total, function.undecided = total + function.undecided, 0
        return float(total)

    def _generate_single_turn(self, *args, **kwargs):
        """TRL's generation; transformers' ``generate`` (no vLLM) runs without cuDNN's attention kernel,
        which would build a graph for every key length it decodes (``oar.sdpa_kernels``)."""
        with contextlib.nullcontext() if self.use_vllm else without_cudnn_attention():
            return super()._generate_single_turn(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        started = time.perf_counter()
        output = super()._generate_and_score_completions(inputs)
        generated = time.perf_counter()
        undecided = self._take_undecided()
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        if mode != "train":
            metrics["time/generate_s"].append(generated - started)
            return output

        with self._memory.phase() as score_peak:
            weights, counts = self._token_weights(output)
        counts["undecided"] = undecided
        scored = time.perf_counter()
        self._log_step_statistics(counts, generate_s=generated - started, score_s=scored - generated,
                                  peak_mb=self._memory.process_peak_mb(), score_peak_mb=score_peak.mb)
        if weights is None:
            return output
        # A new dict: the buffered generation batch is reused across iterations and must stay as built.
        return {**output, "advantages": token_advantages(weights, output["advantages"])}

    def _log_step_statistics(self, counts: dict[str, float], generate_s: float, score_s: float, peak_mb: float,
                             score_peak_mb: float) -> None:
        """Append this generation batch's statistics over every rank's rows (``oar.training.rank_metrics``).

        Fractions and credit statistics are means over all ranks' rows; fallbacks are counts over all
        ranks' rows; times and memory are means over ranks, with the slowest rank's time and the
        largest rank's peak (the figure that has to fit one GPU) under ``*_max`` names. Memory is the
        process peak so far (earlier updates included) and the peak within scoring alone.
        """
        per_rank = {"generate_s": generate_s, "score_s": score_s, "peak_mb": peak_mb, "score_peak_mb": score_peak_mb}
        sums, maxima = over_ranks({**counts, **per_rank, "ranks": 1}, per_rank, self.accelerator.device)
        ranks = sums["ranks"]
        metrics = self._metrics["train"]
        metrics["time/generate_s"].append(sums["generate_s"] / ranks)
        metrics["time/score_s"].append(sums["score_s"] / ranks)
        metrics["time/score_max_s"].append(maxima["score_s"])
        metrics["oar/frac_scored"].append(ratio(sums["scored"], sums["rows"]))
        metrics["oar/frac_active"].append(ratio(sums["active"], sums["rows"]))
        metrics["oar/fallback_no_answer"].append(sums["no_answer"])
        metrics["oar/fallback_nonfinite"].append(sums["nonfinite"])
        metrics["grading/undecided"].append(sums["undecided"])
        metrics["oar/ess_ratio"].append(ratio(sums["ess_sum"], sums["ess_rows"]))
        metrics["oar/top_mass"].append(ratio(sums["top_mass_sum"], sums["top_mass_rows"]))
        for name in STEP_CREDIT:
            if f"{name}_rows" in sums:  # oar.log_step_credit
                metrics[f"oar/{name}"].append(ratio(sums[f"{name}_sum"], sums[f"{name}_rows"]))
        metrics["peak_memory_mb"].append(sums["peak_mb"] / ranks)
        metrics["peak_memory_max_mb"].append(maxima["peak_mb"])
        metrics["memory/score_peak_mb"].append(sums["score_peak_mb"] / ranks)
        metrics["memory/score_peak_max_mb"].append(maxima["score_peak_mb"])
        if self.accelerator.is_main_process:  # the sums are every rank's: said once
            self._fallback_warning.observe(sums["no_answer"], sums["scored"])

    def _gathered_reference(self):
        """The reference model whole on every process during scoring (``oar.training.collective``)."""
        reference = self._reference_model
        if reference is None or not isinstance(reference, torch.nn.Module):
            return contextlib.nullcontext()
        return gathered_for_scoring(self.accelerator.unwrap_model(reference))

    def _group_inputs(self, rows: int) -> dict:
        """Each of this process's rows' group (its prompt, numbered over every process) and reward, for a
        scorer that reads them; nothing for the others."""
        if not self._setup.scorer.reads("groups"):
            return {}
        first = self.accelerator.process_index * rows
        rewards = self._rewards[first: first + rows].tolist() if self._rewards is not None else None
        return {"groups": [(first + i) // self.num_generations for i in range(rows)], "rewards": rewards}

    def _token_weights(self, output) -> tuple[torch.Tensor | None, dict[str, float]]:
        """Weights [B, T] (None for GRPO) and this rank's credit counts: sums over its rows, with the
        number of rows each was summed over (``oar.training.rank_metrics`` adds them over ranks)."""
        setup = self._setup
        advantages = output["advantages"]
        completion_mask = output["completion_mask"].bool()
        active = advantages != 0
        # frac_active (share of responses with A != 0): a step where it is 0 trains nothing (the guard
        # against untrained comparisons counts such steps)
        counts = {"rows": float(len(advantages)), "active": active.sum().item()}
        probes = self._probes(output, completion_mask) if setup.needs_probes else None
        if setup.gated:
            scores = self._scores(probes, active, completion_mask.shape[1])
            self._warn_if_all_zero(scores)
            weights = gated_weights(scores, probes, setup).to(advantages.device) * completion_mask  # padding 0
            counts |= scoring_counts(scores)
        else:
            weights = completion_mask.float()
            counts |= scoring_counts(None)
        counts |= credit_counts(weights, advantages, completion_mask, probes, self.args.oar_top_fraction,
                                setup.settings.log_step_credit)
        return (weights if setup.gated else None), counts

    def _warn_if_all_zero(self, scores: Scores) -> None:
        """Warn, once a run, of a call whose scores are all 0: it trains GRPO, which the run did not ask for."""
        if self._warned_all_zero or not all_zero(scores):
            return
        self._warned_all_zero = True
        logger.warning("scorer %r gave 0 to every reasoning token of every row it scored at step %d: the gate then "
                       "gives every token weight 1, GRPO's uniform advantages (warned once a run)",
                       self._setup.scorer.name, self.state.global_step)

    def _probes(self, output, completion_mask: torch.Tensor) -> list[Probe]:
        """This generation batch's probes, with the parsed positions where the method or the logs read them."""
        probes = self._setup.probe_options.from_padded(self.processing_class, output["prompt_ids"],
                                                       output["prompt_mask"], output["completion_ids"], completion_mask)
        if self._setup.parsed_steps:
            probes = [with_decisive_tokens(self.processing_class, p) for p in probes]
        return probes

    def _scores(self, probes: list[Probe], active: torch.Tensor, width: int) -> Scores:
        """The scorer's scores of this process's rows (``oar.method.importance.score``)."""
        setup, step = self._setup, self.state.global_step
        # keep_fp32_wrapper (the default) keeps accelerate's autocast around the forward: scoring runs in
        # the training forward's precision (bf16 on a GPU with mixed precision), as memory_plan counts it
        model = self.accelerator.unwrap_model(self.model)
        needs_scores = torch.ones_like(active) if setup.settings.score_all else active
        # Under FSDP2 the ranks run different numbers of scoring passes: see oar.training.collective.
        with gathered_for_scoring(model), self._gathered_reference():
            return score(setup.scorer, model, probes, setup.scorer_config, active=needs_scores.cpu(), width=width,
                         probe="lt_logits" if step < setup.settings.warmup_steps else None,
                         seed=scoring_seed(self.args.seed, step, self.accelerator.process_index),
                         **self._group_inputs(len(active)), reference_model=self._reference_model)
