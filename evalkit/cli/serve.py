"""CLI command ``evalkit serve``: the torch sidecar as a standalone OpenAI-compatible server."""

from __future__ import annotations

import json

import click

from evalkit.errors import InputError

# flag -> sidecar setting (SERVE_DEFAULTS in evalkit/replay/backends/sidecar/config.py)
_FLAGS = {"device": "device", "dtype": "dtype", "max_batch": "max_batch",
          "served_model_name": "model_name", "threads": "threads", "seed": "seed",
          "max_model_len": "max_model_len"}


@click.command("serve")
@click.option("--preset", default=None,
              help="Model shape: tiny | small | qwen2.5-0.5b | qwen2.5-1.5b (random weights). "
                   "Default: the config file's model, else tiny.")
@click.option("--device", default=None, help="cpu | cuda | cuda:N  [default: cpu]")
@click.option("--dtype", default=None,
              help="float32 | float16 | bfloat16  [default: float32 on cpu, bfloat16 on cuda]")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--max-batch", type=int, default=None, help="Requests decoded together [16].")
@click.option("--served-model-name", default=None,
              help="The name clients send as 'model' [evalkit-sidecar].")
@click.option("--threads", type=int, default=None, help="torch CPU threads [1].")
@click.option("--seed", type=int, default=None, help="Seed of the random weights [0].")
@click.option("--max-model-len", type=int, default=None,
              help="Prompt + output token limit [the model's max_position_embeddings].")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="TOML/JSON file with any sidecar setting (model overrides, "
                   "default_max_tokens, kv_cache_tokens, request limits and timeouts, ...; "
                   "--print-config lists them); flags win over it.")
@click.option("--api-key", default=None, envvar="VLLM_API_KEY",
              help="Require 'Authorization: Bearer KEY' on the /v1 routes, /tokenize and "
                   "/detokenize (as vLLM's --api-key; also read from VLLM_API_KEY).")
@click.option("--print-config", is_flag=True,
              help="Print the effective settings as JSON and exit without serving.")
def serve_cmd(preset, host, port, config_file, print_config, api_key, **flags):
    """Serve a random-init transformers model with OpenAI's and vLLM's protocols.

    Endpoints: /v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize,
    /health, /ping, /metrics (vLLM metric names), /version.  Stop with Ctrl-C.
    """
    from evalkit.replay.backends.sidecar.config import read_config_file, resolve_serve_config

    raw = read_config_file(config_file) if config_file else {}
    where = config_file or "evalkit serve"
    for flag, key in _FLAGS.items():
        if flags[flag] is not None:
            raw[key] = flags[flag]
    if preset is not None:
        model = raw.get("model")
        raw["model"] = {**model, "preset": preset} if isinstance(model, dict) else preset
    cfg = resolve_serve_config(raw, where=where)
    if print_config:
        click.echo(json.dumps({**cfg, "host": host, "port": port}, indent=2))
        return
    from evalkit.replay.backends.sidecar.serve import port_free, serve
    busy = port_free(host, port)
    if busy is not None:
        raise InputError(f"cannot listen on {host}:{port} ({busy})", column="--port",
                         fix="pick a free port with --port, or stop the server using it")
    if api_key is not None and not api_key.strip():
        raise InputError("the API key is empty", column="--api-key",
                         fix="pass a non-empty key, or leave --api-key out to serve without one")
    serve(cfg, host=host, port=port, api_key=api_key)


def register(cli):
    """Add this module's commands to the top-level group."""
    cli.add_command(serve_cmd)
