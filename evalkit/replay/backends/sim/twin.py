"""The simulator's twin file: sim settings fitted to real runs, written as TOML.

``evalkit sim fit`` writes it; ``evalkit replay --backend sim --sim-params twin.toml`` and
the campaign key ``[backend] sim_params = "twin.toml"`` read it.  Layout::

    schema = "evalkit.twin/1"
    [source]   what it was fitted to (runs, regime, backend, seeds, run count)
    [sim]      SimConfig settings (evalkit/replay/backends/sim/model.py)
    [ci]       95% bootstrap interval over seeds of each fitted setting: [low, high]
    [notes]    lines = [...]

A replay that uses a twin records its sha256 and name (``twin_sha256``, ``twin_name``) in
the backend settings of run.json, so a harness result names the exact twin behind it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from evalkit.config import read_config
from evalkit.errors import InputError
from evalkit.replay.backends.sim.model import SimConfig

SCHEMA = "evalkit.twin/1"


@dataclass
class Twin:
    sim: dict                                   # SimConfig settings
    ci: dict = field(default_factory=dict)      # setting -> [low, high]
    source: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_toml(self) -> str:
        lines = ["# A simulator twin fitted to real runs by `evalkit sim fit`.",
                 "# Use: evalkit replay ... --backend sim --sim-params THIS_FILE",
                 f'schema = "{SCHEMA}"', ""]
        for name, table in (("source", self.source), ("sim", self.sim), ("ci", self.ci)):
            lines.append(f"[{name}]")
            lines += [f"{key} = {_value(val)}" for key, val in table.items() if val is not None]
            lines.append("")
        lines += ["[notes]", f"lines = {_value(list(self.notes))}", ""]
        return "\n".join(lines)

    def write(self, path) -> str:
        """Write the TOML file; returns its sha256."""
        text = self.to_toml()
        Path(path).write_text(text)
        return hashlib.sha256(text.encode()).hexdigest()


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write a non-finite number ({v}) to a twin file")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)            # JSON string escapes are valid TOML basic strings
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if hasattr(v, "item"):              # numpy scalars
        return _value(v.item())
    raise TypeError(f"cannot write {type(v).__name__} to a twin file")


@dataclass(frozen=True)
class LoadedTwin:
    settings: dict
    sha256: str
    name: str
    source: dict
    ci: dict


def load_twin(path) -> LoadedTwin:
    """Read and check a twin file (InputError naming the file and key on bad input)."""
    path = Path(path)
    doc = read_config(path, what="twin file", action="cannot read the twin file",
                      missing_fix="fit one with `evalkit sim fit REAL_RUNS --out twin.toml`",
                      syntax_message="malformed twin file",
                      syntax_fix="regenerate it with `evalkit sim fit`")
    data = doc.data
    if data.get("schema") != SCHEMA:
        raise doc.error("schema", f"not a twin file (schema = {data.get('schema')!r})",
                        f'a twin file starts with schema = "{SCHEMA}"')
    sim = data.get("sim")
    if not isinstance(sim, dict) or not sim:
        raise doc.error("sim", "twin file has no [sim] table",
                        "regenerate it with `evalkit sim fit`")
    for key in ("twin_sha256", "twin_name"):
        sim.pop(key, None)
    try:                                              # every setting must be a valid one
        SimConfig.from_dict(sim, source=str(path))
    except InputError as exc:
        raise doc.table("sim", sim).error(exc.column or "sim", exc.message, exc.fix) from None
    return LoadedTwin(settings=dict(sim), sha256=hashlib.sha256(doc.text.encode()).hexdigest(),
                      name=path.name, source=dict(data.get("source", {})),
                      ci=dict(data.get("ci", {})))


def twin_backend_config(path, overrides: dict | None = None) -> dict:
    """Sim backend settings: the twin's, then ``overrides`` on top, plus the twin's hash."""
    twin = load_twin(path)
    cfg = dict(twin.settings)
    cfg.update(overrides or {})
    cfg["twin_sha256"] = twin.sha256
    cfg["twin_name"] = twin.name
    return cfg
