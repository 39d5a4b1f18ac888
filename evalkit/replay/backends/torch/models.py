"""Random-init transformers causal LMs from a config dict (no hub downloads).

``{"preset": "tiny"}`` or a preset plus overrides, e.g. ``{"preset": "qwen2.5-0.5b",
"num_hidden_layers": 4}``.  Presets only give the *shape* of a published model.
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


def resolve_config(spec: dict | str | None) -> dict:
    """Preset + overrides -> a plain dict of config fields (recorded as effective)."""
    if spec is None:
        spec = {"preset": "tiny"}
    if isinstance(spec, str):
        spec = {"preset": spec}
    spec = dict(spec)
    preset = spec.pop("preset", "tiny")
    if preset not in PRESETS:
        raise InputError(f"unknown model preset {preset!r}", column="model.preset",
                         fix=f"use one of {sorted(PRESETS)} or give every config field")
    out = dict(PRESETS[preset])
    out.update(spec)
    out.setdefault("max_position_embeddings", 32768)
    out["preset"] = preset
    return out


def build_model(fields: dict, *, seed: int, device: str = "cpu", dtype: str = "float32"):
    """Build the model with weights drawn from ``torch.manual_seed(seed)``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in fields.items() if k != "preset"}
    model_type = fields.pop("model_type", "qwen2")
    config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(int(seed))
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config)
    return model.to(dtype=getattr(torch, dtype))


def cache_kwarg(model) -> str:
    """Name of the KV-cache argument of ``model.forward`` (renamed across versions)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def n_params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))
