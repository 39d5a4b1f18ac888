"""evalkit: audit claimed serving-SLO improvements of training-sync schedulers.

``run_audit(input_path, out_dir)`` audits a campaign and writes its report;
``audit_campaign(input_path)`` evaluates without writing; ``load_protocol(name_or_path)``;
``gate(source, policy, ...)`` decides as ``evalkit gate`` does and returns the claim's numbers.
"""

from evalkit.version import __version__  # noqa: F401

_ENTRY_POINTS = {"run_audit": "evalkit.compose", "audit_campaign": "evalkit.audit.result",
                 "load_protocol": "evalkit.audit.protocol", "gate": "evalkit.audit.gate_api"}


def __getattr__(name):
    # loaded on first use: `evalkit --help` must not load pandas (the audit's dependencies)
    if name in _ENTRY_POINTS:
        import importlib

        return getattr(importlib.import_module(_ENTRY_POINTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
