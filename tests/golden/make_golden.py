"""Record the audit documents that tests/e2e/test_audit_golden.py holds the audit to, and the
whole document of sim_bursty the gate tests decide on (tests/report_documents/).

    python tests/golden/make_golden.py            # fixture campaigns and the demo

Run it only when a change is meant to move audit numbers, and say why in the commit.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from evalkit.cli.main import cli  # noqa: E402
from tests.golden.compare import FIXTURE_CAMPAIGNS, golden_path  # noqa: E402


def audit_json(target: Path, out: Path) -> Path:
    res = CliRunner().invoke(cli, ["audit", str(target), "--out", str(out)])
    if res.exit_code not in (0, 1):
        raise SystemExit(f"audit of {target} exited {res.exit_code}: {res.output}")
    return out / "audit.json"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in FIXTURE_CAMPAIGNS:
            src = audit_json(REPO / "fixtures" / "campaigns" / name, Path(tmp) / name)
            shutil.copyfile(src, golden_path(name))
            if name == "sim_bursty":
                shutil.copyfile(src, REPO / "tests" / "report_documents" / f"{name}.audit.json")
        res = CliRunner().invoke(cli, ["demo", "--out", str(Path(tmp) / "demo"),
                                       "--no-progress"])
        if res.exit_code != 0:
            raise SystemExit(res.output)
        shutil.copyfile(Path(tmp) / "demo" / "report" / "audit.json", golden_path("demo"))


if __name__ == "__main__":
    main()
