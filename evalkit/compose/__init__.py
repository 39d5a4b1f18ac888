"""The compositions above the layers: audit a campaign, then publish the report of its
document (``run_audit``; the audit never imports the report, and the report reads only the
document), and sweep until the sequential audit decides (:mod:`evalkit.compose.until_decided`).
"""

from __future__ import annotations

from pathlib import Path

from evalkit.audit.result import AuditResult, audit_campaign
from evalkit.progress import step
from evalkit.report.publish import publish
from evalkit.report.render import render

__all__ = ["run_audit"]


def run_audit(input_path, out_dir, protocol=None, alpha=None, seed: int = 0,
              challenge=None) -> AuditResult:
    """Audit ``input_path`` and publish report.html, report.md, audit.json and figures into
    ``out_dir`` atomically, leaving files evalkit did not write in place (``challenge``: the
    reviewer's challenge file, see :func:`evalkit.audit.result.audit_campaign`)."""
    result = audit_campaign(input_path, protocol=protocol, alpha=alpha, seed=seed,
                            challenge=challenge)
    with step("audit: writing audit.json"):
        result.document = result.to_dict()
    # built in a temporary directory beside out_dir, then swapped in (report/publish.py)
    with step("report: drawing the figures and writing the report"):
        result.published = publish(Path(out_dir), render(result.document))
    result.out_dir = Path(out_dir)
    return result
