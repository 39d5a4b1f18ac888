"""Random-init transformers causal LMs from a config dict (no hub downloads).

``{"preset": "tiny"}`` or a preset plus overrides, e.g. ``{"preset": "qwen2.5-0.5b",
"num_hidden_layers": 4}``.  Presets only give the *shape* of a published model.  Shared by
the torch backend's learners and the serving sidecar's engine.
"""

from __future__ import annotations

import inspect

from evalkit.errors import InputError

PRESETS = {
    "tiny": dict(model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "small": dict(model_type="qwen2", vocab_size=2048, hidden_size=128, intermediate_size=384,
                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    "qwen2.5-0.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=896,
                         intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=1536,
                         intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, tie_word_embeddings=True),
}


def resolve_config(spec: dict | str | None, *, where: str = "model") -> dict:
    """Preset + overrides -> a plain dict of config fields (recorded as effective).

    ``spec`` is a preset name, or ``{"preset": name, <config field>: value, ...}`` (the
    preset defaults to ``tiny``).  Unknown presets, unknown config fields and other types
    raise :class:`InputError` listing what is valid: a typo never builds a default-sized
    model.  A dict that is already resolved resolves to itself.
    """
    if spec is None:
        spec = {"preset": "tiny"}
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, dict):
        raise InputError(f"a model is a preset name or a table, got {spec!r}", column=where,
                         fix=f"use one of {sorted(PRESETS)}, or {{preset = NAME, ...overrides}}")
    spec = dict(spec)
    preset = spec.pop("preset", "tiny")
    if preset not in PRESETS:
        raise InputError(f"unknown model preset {preset!r}", column=f"{where}.preset",
                         fix=f"use one of {sorted(PRESETS)} (overrides go beside the preset)")
    out = dict(PRESETS[preset])
    overrides = {k: v for k, v in spec.items() if out.get(k, object()) != v}
    if overrides:
        check_fields(overrides, out.get("model_type", "qwen2"), where=where)
    out.update(spec)
    out.setdefault("max_position_embeddings", 32768)
    out["preset"] = preset
    return out


def check_fields(fields: dict, model_type: str, *, where: str = "model") -> None:
    """Every key must be a field of the transformers config of ``model_type``."""
    from transformers import AutoConfig

    try:
        known = AutoConfig.for_model(model_type)
    except ValueError as exc:
        raise InputError(f"unknown model_type {model_type!r}", column=f"{where}.model_type",
                         fix="use a transformers model type such as 'qwen2' or 'llama'") from exc
    valid = set(known.to_dict()) | {"model_type"}
    bad = sorted(k for k in fields if k not in valid and not hasattr(known, k))
    if bad:
        common = sorted({k for p in PRESETS.values() for k in p} | {"max_position_embeddings"})
        raise InputError(f"unknown {model_type} config fields {bad}", column=f"{where}.{bad[0]}",
                         fix=f"use fields of the transformers {model_type} config, e.g. {common}")


def build_model(fields: dict, *, seed: int, device: str = "cpu", dtype: str = "float32"):
    """Build the model on ``device`` in ``dtype`` with weights from :func:`init_params`.

    The model is created directly on the target device and dtype (no CPU float32 copy),
    with transformers' own construction-time init skipped where the version allows it.
    """
    import contextlib

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in fields.items() if k != "preset"}
    model_type = fields.pop("model_type", "qwen2")
    config = AutoConfig.for_model(model_type, **fields)
    torch_dtype = getattr(torch, dtype)
    major = int(transformers.__version__.split(".")[0])
    kw = {"dtype": torch_dtype} if major >= 5 else {"torch_dtype": torch_dtype}
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            no_init_weights = contextlib.nullcontext
    with torch.device(device), no_init_weights():
        model = AutoModelForCausalLM.from_config(config, **kw)
    model = model.to(dtype=torch_dtype)       # no-op unless a version ignored the dtype
    init_params(model, seed)
    return model


def init_params(model, seed: int) -> None:
    """Deterministic in-place (re-)initialisation of every parameter from ``seed``.

    Norm weights 1, biases 0, everything else N(0, initializer_range) drawn in parameter
    order from one generator on the parameters' device: the same seed gives bit-identical
    weights whether the model was just built or trained by an earlier run.
    """
    import torch

    std = float(getattr(model.config, "initializer_range", 0.02))
    params = list(model.named_parameters())
    dev = params[0][1].device
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    with torch.no_grad():
        for name, p in params:
            if p.ndim == 1 and "norm" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, std, generator=gen)


def cache_kwarg(model) -> str:
    """Name of the KV-cache argument of ``model.forward`` (renamed across versions)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"

