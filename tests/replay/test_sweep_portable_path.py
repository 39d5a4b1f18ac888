"""run.json records the campaign file without absolute machine paths."""

from __future__ import annotations

from evalkit.replay.job import _portable_path


def test_campaign_path_is_relative_or_a_name(tmp_path, monkeypatch):
    inside = tmp_path / "examples" / "c.toml"
    inside.parent.mkdir()
    inside.write_text("")
    monkeypatch.chdir(tmp_path)
    assert _portable_path(inside) == "examples/c.toml"
    elsewhere = tmp_path.parent / "other.toml"
    monkeypatch.chdir(inside.parent)
    assert _portable_path(elsewhere) == "other.toml"
