"""``short_repr``: values cut at sixty characters and huge integers described, not printed."""

from __future__ import annotations

from evalkit.runlog.schema import short_repr


def test_short_cuts_at_sixty_characters_and_describes_huge_integers():
    sixty = "a" * 58                       # repr adds two quotes: 60 characters
    assert short_repr(sixty) == repr(sixty)
    sixty_one = "a" * 59
    assert short_repr(sixty_one) == repr(sixty_one)[:60] + "... (61 characters)"
    assert short_repr(10 ** 30) == str(10 ** 30)
    assert short_repr(10 ** 30 + 1) == "a 31-digit integer"
    assert short_repr(-(10 ** 30) - 1) == "a 31-digit integer"
    assert short_repr(-(10 ** 30)) == str(-(10 ** 30))
    assert short_repr(True) == "True" and short_repr("x") == "'x'" and short_repr(2.5) == "2.5"


def test_huge_integers_are_described_not_printed_from_just_above_ten_to_the_thirty():
    from evalkit.runlog.schema import short_repr as _short
    assert _short(10 ** 30) == repr(10 ** 30)
    assert _short(-(10 ** 30)) == repr(-(10 ** 30))
    assert _short(10 ** 30 + 1) == "a 31-digit integer"
    assert _short(True) == "True"
    assert _short("x" * 61) == repr("x" * 61)[:60] + "... (63 characters)"
    assert _short("x" * 58) == repr("x" * 58)
