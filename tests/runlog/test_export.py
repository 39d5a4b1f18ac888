"""python -m evalkit.runlog.export --check: exit 0 in step, 1 naming each stale file."""

from __future__ import annotations

from evalkit.runlog import export, schema


def test_check_is_exit_0_and_silent_when_the_files_are_in_step(capsys):
    assert export.main(["--check"]) == 0
    assert capsys.readouterr().out == ""


def test_check_is_exit_1_naming_each_stale_file(monkeypatch, capsys):
    extra = schema.MetaKey("made_up_key", ("string",), False, "a key no file documents")
    monkeypatch.setattr(schema, "META_KEYS", schema.META_KEYS + (extra,))
    assert export.main(["--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == [f"out of date: evalkit/runlog/{name} (run python -m "
                           "evalkit.runlog.export)"
                           for name in ("FORMAT.md", "schemas/run.schema.json")]
