"""Run files that parse but lie about their shape: exit 2 naming file and column, never exit 3.

A Parquet table may hold one column name twice (pandas and Arrow then pick one arbitrarily, and
the validator used to fail on the ambiguous lookup with exit 3); a time column may be float16
(three significant digits: a time of 1,000 s is off by up to 0.5 s); ``schema_version: true``
equals 1 in Python and used to pass as version 1.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.runlog.io import TableFile

RUN = "fixture-s0-fixed_h"


def _invoke(args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def _duplicate(run_dir, table="requests", column="sent_s"):
    path = run_dir / f"{table}.parquet"
    t = pq.read_table(path)
    pq.write_table(pa.Table.from_arrays(t.columns + [t.column(column)],
                                        names=t.column_names + [column]), path)
    return path


def test_table_file_refuses_a_duplicated_column_naming_it(copy_fixture):
    path = _duplicate(copy_fixture("runs") / RUN, "merges", "start_s")
    with pytest.raises(InputError) as err:
        TableFile(path.parent, "merges")
    assert err.value.column == "start_s" and err.value.file == str(path)
    assert "2 times" in err.value.message


def test_validate_summarize_audit_refuse_a_duplicated_column(copy_fixture, tmp_path):
    runs = copy_fixture("runs")
    path = _duplicate(runs / RUN)
    code, out, err = _invoke(["validate", runs])
    assert code == 2 and str(path) in out and "'sent_s' 2 times" in out, out + err
    for args in (["summarize", runs], ["audit", runs, "--out", tmp_path / "report"]):
        code, out, err = _invoke(args)
        assert code == 2 and "'sent_s' 2 times" in err and "internal error" not in err, \
            out + err


def test_a_float16_time_column_is_refused_with_its_type_and_the_required_one(copy_fixture):
    runs = copy_fixture("runs")
    path = runs / RUN / "requests.parquet"
    t = pq.read_table(path)
    i = t.schema.get_field_index("arrival_s")
    pq.write_table(t.set_column(i, "arrival_s", t.column(i).cast(pa.float16())), path)
    code, out, err = _invoke(["validate", runs])
    assert code == 2, out + err
    line = next(x for x in out.splitlines() if "column=arrival_s" in x)
    assert "ERROR" in line and "halffloat" in line and "float64" in line, out


@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_schema_version_must_be_the_integer_itself(copy_fixture, version):
    runs = copy_fixture("runs")
    meta_path = runs / RUN / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = version
    meta_path.write_text(json.dumps(meta))
    code, out, err = _invoke(["validate", runs])
    assert code == 2, out + err
    line = next(x for x in out.splitlines() if "column=schema_version" in x)
    assert "ERROR" in line and f"unknown schema_version {version!r}" in line, out


@pytest.mark.parametrize("part", ["requested", "effective"])
def test_settings_parts_must_be_objects(copy_fixture, tmp_path, part):
    """The audit's policy registry reads settings.<part>.policy: a string there used to end
    the audit with exit 3 (found by tests/reliability/test_fuzz_readers.py)."""
    runs = copy_fixture("runs")
    meta_path = runs / RUN / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["settings"][part] = "=HYPERLINK(\"x\")"
    meta_path.write_text(json.dumps(meta))
    code, out, err = _invoke(["validate", runs])
    assert code == 2 and f"column=settings.{part}" in out and "must be a JSON object" in out
    code, out, err = _invoke(["audit", runs, "--out", tmp_path / "report"])
    assert code == 2 and f"settings.{part}" in err and "internal error" not in err, out + err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_summary_table_with_a_repeated_column_is_refused(tmp_path, suffix):
    """pandas renames a repeated CSV header to 'seed.1' and the second column was silently
    ignored; Parquet failed with a message naming no column."""
    path = tmp_path / f"table{suffix}"
    if suffix == ".csv":
        path.write_text("policy,seed,violation_rate, seed\nwa,1,0.1,2\n")
    else:
        pq.write_table(pa.Table.from_arrays(
            [pa.array(["wa"]), pa.array([1]), pa.array([0.1]), pa.array([2])],
            names=["policy", "seed", "violation_rate", "seed"]), path)
    code, out, err = _invoke(["audit", path, "--out", tmp_path / "report"])
    assert code == 2 and "column/key 'seed'" in err and "2 times" in err, out + err
