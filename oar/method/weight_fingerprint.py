"""A cheap fingerprint of a model's weights, taken before and after every scoring call, so that a scorer
that changes them stops, named (the scorer contract: a scorer leaves ``batch.model`` as it found it).

Per parameter the fingerprint keeps four marks, each cheap to take:

- the parameter object itself: a scorer that swaps a module's ``nn.Parameter`` for another is caught;
- torch's version counter (``Tensor._version``), which every in-place operation on the parameter or a
  view of it bumps (``p.add_(...)`` under ``no_grad``, ``p.detach().copy_(...)``, ``optimizer.step()``),
  exact whatever it writes; it is not bumped through ``p.data``, which has a counter of its own;
- whether it holds a ``.grad`` (a scorer that calls ``backward()`` leaves one, one that calls
  ``zero_grad()`` takes away the trainer's);
- ``SAMPLES`` of its values at evenly strided positions, compared bit for bit: a write through ``.data``
  (``p.data.mul_(0.9)``, ``p.data.copy_(...)``, ``p.data = ...``, a dtype cast) changes them. A write
  through ``.data`` to a few positions between the sampled ones (one embedding row) is not seen: the
  price of not reading the whole model twice per call.

Cost, measured by ``perf/weight_fingerprint_cost.py --shape <shape>`` (two fingerprints and
their comparison, what one scoring call pays), on 2 shared CPU cores: 1.1-2.3 ms on the testbed's
shipped policy ``chain_f1`` (38 parameter tensors), against 2.4 s for one OAR-G scoring call of 8 rows
on it (0.1%); 9.5-26 ms at Qwen2.5-1.5B's shapes (338 tensors, 1.54 B weights), where OAR-G's scoring
adds about 9 s to a step on an H200 (docs/cost.md: 35 s against GRPO's 26 s), so under 0.3%. The cost
grows with the number of parameter tensors, not with their size (it reads ``SAMPLES`` values of each);
on a GPU it is the same Python loop plus one device-to-host wait per comparison (not measured: no GPU
was at hand).

The per-call fingerprint sees a call's own writes to the parameters; it cannot see a write between its
samples, a change to a buffer (rotary frequencies, a norm's running statistics), a hook added to a module
(which changes every later forward with no weight changed), or a change made outside a call through a
reference the scorer kept. Where a model scores many calls of one scorer in a row, as the token-credit
benchmark's entries do, :class:`ModelDigest` is taken around the whole run: the exact sha256 of every
parameter's and buffer's bytes and the hooks of every module, once before and once after: 6-8 ms on a
shipped testbed policy, 5.5 s at Qwen2.5-1.5B's shapes on 2 shared CPU cores
(``perf/weight_fingerprint_cost.py --shape <shape> --digest``), once an entry, never per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import hashlib

import torch
from torch import Tensor

SAMPLES = 16  # values read per parameter (fewer where it has fewer)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # same-width integer: NaN == NaN


def _local(tensor: Tensor) -> Tensor:
    """This process's values of a (possibly distributed) tensor."""
    to_local = getattr(tensor, "to_local", None)  # a DTensor (FSDP2 outside its gathered scoring)
    return to_local() if callable(to_local) else tensor


def _sample(parameter: Tensor) -> Tensor:
    flat = _local(parameter.detach()).reshape(-1)
    step = max(1, flat.numel() // SAMPLES)
    return flat[::step][:SAMPLES]


@dataclass(frozen=True)
class WeightFingerprint:
    """The marks of one model's parameters at one moment (see the module's docstring)."""

    names: tuple[str, ...]
    parameters: tuple[int, ...]  # id() of each parameter object
    versions: tuple[int, ...]
    has_grad: tuple[bool, ...]
    # the sampled values of the parameters of one (device, dtype), concatenated as integers of their width,
    # and the parameters they were sampled from, in order, with where each one's samples end
    samples: tuple[tuple[Tensor, tuple[int, ...], tuple[int, ...]], ...]

    @classmethod
    def of(cls, model: torch.nn.Module) -> WeightFingerprint:
        named = [(name, p) for name, p in model.named_parameters() if p.device.type != "meta"]
        groups: dict[tuple[Any, Any], tuple[list[Tensor], list[int]]] = {}
        for index, (_, p) in enumerate(named):
            views, owners = groups.setdefault((p.device, p.dtype), ([], []))
            views.append(_sample(p))
            owners.append(index)
        samples = []
        for (_, dtype), (views, owners) in groups.items():
            values = torch.cat(views)  # a copy: later writes to the parameters do not reach it
            bits = _BITS.get(values.element_size()) if dtype != torch.bool else None
            ends, total = [], 0
            for view in views:
                total += view.numel()
                ends.append(total)
            samples.append((values.view(bits) if bits is not None else values, tuple(owners), tuple(ends)))
        return cls(names=tuple(name for name, _ in named), parameters=tuple(id(p) for _, p in named),
                   versions=tuple(p._version for _, p in named), has_grad=tuple(p.grad is not None for _, p in named),
                   samples=tuple(samples))

    def change_since(self, before: WeightFingerprint) -> str | None:
        """What changed from ``before`` to this fingerprint, in words naming the first parameter; None if
        nothing did."""
        if self.names != before.names or self.parameters != before.parameters:
            gone = [n for n, i in zip(before.names, before.parameters) if (n, i) not in set(zip(self.names,
                                                                                               self.parameters))]
            return f"replaced or removed parameter {(gone or list(self.names))[0]!r}"
        for name, now, then in zip(self.names, self.versions, before.versions):
            if now != then:
                return f"wrote parameter {name!r} in place"
        for name, now, then in zip(self.names, self.has_grad, before.has_grad):
            if now != then:
                return (f"left a gradient on parameter {name!r}" if now else
                        f"cleared the gradient of parameter {name!r}")
        for (now, owners, ends), (then, _, _) in zip(self.samples, before.samples):
            if now.dtype != then.dtype or now.shape != then.shape:
                return f"changed the dtype or shape of parameter {self.names[owners[0]]!r}"
            if not torch.equal(now, then):
                first = int((now != then).nonzero()[0, 0])
                owner = owners[next(k for k, end in enumerate(ends) if first < end)]
                return f"changed the values of parameter {self.names[owner]!r} (through .data)"
        return None


def fingerprints(models: dict[str, Any]) -> dict[str, WeightFingerprint]:
    """The fingerprint of each model that is a torch module, by the name the error will use for it."""
    return {role: WeightFingerprint.of(m) for role, m in models.items() if isinstance(m, torch.nn.Module)}


def first_change(before: dict[str, WeightFingerprint], models: dict[str, Any]) -> str | None:
    """What changed in any of ``models`` since ``before`` (``fingerprints`` of the same models), naming the
    model and the parameter; None if nothing did."""
    for role, then in before.items():
        change = WeightFingerprint.of(models[role]).change_since(then)
        if change is not None:
            return f"{change} of {role}"
    return None


# ------------------------------------------------------------------------------------ the exact digest


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
          "_load_state_dict_pre_hooks")


def _sha256(tensor: Tensor) -> str:
    flat = _local(tensor.detach()).reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    if not flat.numel():
        return hashlib.sha256(b"").hexdigest()
    return hashlib.sha256(flat.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _install_library_hooks(model: torch.nn.Module) -> None:
    """transformers installs its output-capturing forward hooks (inert unless a forward asks for attentions or
    hidden states) on the first forward that asks for them, once a model: install them before a digest, so
    that a scorer that reads attentions or hidden states is not taken for one that left hooks behind."""
    try:
        from transformers import PreTrainedModel
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:  # a transformers without lazily installed output hooks
        return
    if isinstance(model, PreTrainedModel):
        maybe_install_capturing_hooks(model)


@dataclass(frozen=True)
class ModelDigest:
    """Every parameter's and buffer's exact bytes (sha256), dtype, shape and object, and the number of hooks
    on every module: what a model leaves behind for whatever scores or trains with it next."""

    tensors: tuple[tuple[str, int, str, str], ...]  # (kind and name, id, dtype and shape, sha256)
    hooks: tuple[tuple[str, int], ...]  # (module name, number of hooks), for the modules that have any

    @classmethod
    def of(cls, model: torch.nn.Module) -> ModelDigest:
        _install_library_hooks(model)
        tensors = []
        for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
            for name, t in named:
                if t.device.type == "meta":
                    continue
                tensors.append((f"{kind} {name!r}", id(t), f"{t.dtype} {tuple(t.shape)}", _sha256(t)))
        hooks = tuple((name or "the model", n) for name, module in model.named_modules()
                      if (n := sum(len(getattr(module, h, {})) for h in _HOOKS)))
        return cls(tuple(tensors), hooks)

    def change_since(self, before: ModelDigest) -> str | None:
        """What changed from ``before``, in words naming the first tensor or module; None if nothing did."""
        then = {t[0]: t for t in before.tensors}
        now = {t[0]: t for t in self.tensors}
        for name in then:
            if name not in now:
                return f"removed {name}"
        for name, (_, ident, shape, digest) in now.items():
            if name not in then:
                return f"added {name}"
            _, ident0, shape0, digest0 = then[name]
            if shape != shape0:
                return f"changed the dtype or shape of {name} ({shape0} to {shape})"
            if digest != digest0:
                return f"changed the values of {name}"
            if ident != ident0:
                return f"replaced {name} by another tensor"
        if self.hooks != before.hooks:
            added = sorted(set(self.hooks) - set(before.hooks)) or sorted(set(before.hooks) - set(self.hooks))
            return f"changed the hooks of module {added[0][0]!r} ({dict(before.hooks).get(added[0][0], 0)} to " \
                   f"{dict(self.hooks).get(added[0][0], 0)})"
        return None


def digests(models: dict[str, Any]) -> dict[str, ModelDigest]:
    """The exact digest of each model that is a torch module (the same model under two names: once)."""
    seen: dict[int, ModelDigest] = {}
    out = {}
    for role, m in models.items():
        if isinstance(m, torch.nn.Module):
            out[role] = seen.setdefault(id(m), ModelDigest.of(m))
    return out


def first_digest_change(before: dict[str, ModelDigest], models: dict[str, Any]) -> str | None:
    """What changed in any of ``models`` since ``before`` (``digests`` of the same models), naming the model
    and the tensor or module; None if nothing did."""
    now: dict[int, ModelDigest] = {}
    for role, then in before.items():
        model = models[role]
        change = now.setdefault(id(model), ModelDigest.of(model)).change_since(then)
        if change is not None:
            return f"{change} of {role}"
    return None
