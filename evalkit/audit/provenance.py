"""Where a report comes from: campaign name, protocol and its hashes, evalkit version, and a
fingerprint of the audited input.

``protocol_content_sha256`` (the hash of the protocol's rules) is the protocol's identity that
every report, ``diff`` and ``gate`` prints; ``protocol_sha256`` hashes the file's text.

The campaign name is the stem of the campaign file the runs were swept from (recorded by
``evalkit sweep`` in each run's ``settings.requested.campaign``; a generic ``campaign.toml``
is named by its folder), else the input's base name.
The input fingerprint is the SHA-256 of the per-run table the audit read (every run's id,
role, policy, seed, V, K, exposure and load quantities, in run-id order) and of the excluded
runs: two audits with the same fingerprint saw the same evidence, wherever the files lay.
Computed where the runs are read (the run.json of each run as the campaign parsed it); the
report only prints it.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath, PureWindowsPath

from evalkit.version import __version__

__all__ = ["campaign_name", "input_fingerprint", "provenance"]


GENERIC_STEMS = frozenset({"campaign", "campaigns", "config", "sweep"})


def _campaign_stem(path: str) -> str:
    """A campaign file's name without ``.toml``; a generic file name (``campaign.toml``) is
    named by its folder instead (``examples/cpu_real/campaign.toml`` -> ``cpu_real``)."""
    pure = PureWindowsPath(path) if "\\" in path else PurePosixPath(path)
    stem = pure.name[:-5] if pure.name.endswith(".toml") else pure.name
    if stem.lower() in GENERIC_STEMS and pure.parent.name:
        return pure.parent.name
    return stem


def campaign_name(runset) -> tuple[str, str]:
    """(name, where it came from): the campaign file's stem(s) or the input's base name."""
    stems = set()
    for run_id in runset.run_ids:
        try:
            path = runset.meta(run_id)["settings"]["requested"]["campaign"]
        except (KeyError, TypeError):
            continue
        if isinstance(path, str) and path:
            stems.add(_campaign_stem(path))
    if stems:
        return " + ".join(sorted(stems)), "campaign file"
    name = str(runset.input_name)
    if runset.source == "summary":
        return (name.rsplit(".", 1)[0] or name), "summary table"
    return name, "input directory"


def input_fingerprint(runset) -> str:
    runs = runset.runs
    cols = sorted(c for c in runs.columns if not str(c).startswith("_"))
    table = runs[cols].sort_values("run_id", kind="mergesort")
    h = hashlib.sha256()
    h.update(table.to_csv(index=False, lineterminator="\n").encode("utf-8", "surrogatepass"))
    for e in sorted(runset.excluded, key=lambda e: str(e.get("run_id"))):
        h.update(f"excluded\0{e.get('run_id')}\0{e.get('reason')}\n".encode("utf-8",
                                                                            "surrogatepass"))
    return h.hexdigest()


def provenance(runset, proto) -> dict:
    name, source = campaign_name(runset)
    return {
        "campaign": name, "campaign_source": source,
        "protocol": proto.name, "protocol_version": proto.version,
        "protocol_sha256": proto.sha256, "protocol_content_sha256": proto.content_sha256,
        "evalkit_version": __version__,
        "input_fingerprint": input_fingerprint(runset),
        "input_fingerprint_of": "per-run table of the audited runs and the excluded runs",
    }
