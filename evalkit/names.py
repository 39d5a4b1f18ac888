"""Regime and policy names that cannot be bent.

A claim is the runs of one (regime, policy); a run whose policy is ``wa\\u200b`` (a zero-width
space) or ``wа`` (Cyrillic а) looks like ``wa`` in every report yet is another claim, so the
losing seeds of ``wa`` can be moved out of sight.  Every name is therefore

* NFKC-normalised (``ｗａ`` -> ``wa``: compatibility forms name the same thing), and
* refused (:class:`~evalkit.errors.InputError`, exit 2, naming the file and key) when it holds
  a control, format (bidi controls, zero-width characters), private-use, unassigned or
  other invisible character, whitespace other than inner ASCII spaces, non-ASCII
  punctuation or symbols (``wa‐x`` with U+2010 for ``wa-x``), a letter of more
  than one script (mixed script: ``wа``), a letter outside ASCII that is a Latin lookalike
  (``ɑ``, ``ı``; accented letters that decompose to an ASCII letter are fine), or consists only
  of letters that look Latin in another script (whole-script confusable: Cyrillic ``ра``).

Names are also compared after case folding (:func:`name_key`): ``Bursty`` beside ``bursty``
(or ``WA`` beside ``wa``) in one input is refused by :func:`refuse_case_twins`, naming both
spellings, rather than read as two claims (the losing seeds of one hidden under the other) or
merged silently under a spelling the report would have to pick.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from evalkit.errors import InputError

__all__ = ["file_part", "name_key", "name_problem", "normalise_name", "refuse_case_twins",
           "reserved_name_problem", "reserved_names_text"]

# Default-ignorable code points that are not in a format/control category (rendered as
# nothing): combining grapheme joiner, Hangul fillers, variation selectors, ...
_INVISIBLE_RANGES = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
                     (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0),
                     (0xE0100, 0xE01EF))
_REFUSED_CATEGORIES = {"Cc": "a control character", "Cf": "an invisible format character",
                       "Co": "a private-use character", "Cn": "an unassigned code point",
                       "Cs": "a surrogate", "Zl": "a line separator",
                       "Zp": "a paragraph separator"}
# letters of other scripts that look like Latin letters (whole-script confusables)
_LATIN_LOOKALIKES = set(
    "аеорсухіјѕԁԛԝһӏԍАВЕКМНОРСТУХІЈЅԚԜҮӀ"                # Cyrillic
    "αβεικνορτυχωΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"                         # Greek
    "ՕօսՍոհզ")                                           # Armenian
# scripts that are written together and count as one (Japanese)
_SCRIPT_GROUPS = {"HIRAGANA": "JAPANESE", "KATAKANA": "JAPANESE", "CJK": "JAPANESE",
                  "KATAKANA-HIRAGANA": "JAPANESE", "IDEOGRAPHIC": "JAPANESE"}


def _invisible(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _INVISIBLE_RANGES)


def _script(ch: str) -> str:
    """The script of a letter, from its Unicode name's first word (LATIN, CYRILLIC, ...)."""
    word = unicodedata.name(ch, "UNKNOWN").split(" ")[0]
    return _SCRIPT_GROUPS.get(word, word)


def _latin_ok(ch: str) -> bool:
    """An ASCII letter, or one that decomposes to an ASCII letter and combining marks."""
    if ch.isascii():
        return True
    base = unicodedata.normalize("NFD", ch)
    return base[0].isascii() and base[0].isalpha() and all(
        unicodedata.category(c).startswith("M") for c in base[1:])


def name_problem(name: str) -> str | None:
    """Why ``name`` (already NFKC-normalised) cannot name a regime or policy, or None."""
    if not name.strip():
        return "the name is empty"
    if name != name.strip(" "):
        return "the name starts or ends with a space"
    scripts, letters = set(), []
    for i, ch in enumerate(name):
        cp, cat = ord(ch), unicodedata.category(ch)
        where = f"character {i + 1} (U+{cp:04X} {unicodedata.name(ch, 'unnamed')})"
        if cat in _REFUSED_CATEGORIES:
            return f"{where} is {_REFUSED_CATEGORIES[cat]}"
        if _invisible(cp):
            return f"{where} is invisible"
        if cat == "Zs" and ch != " ":
            return f"{where} is a space other than U+0020"
        if cat[0] in "PS" and not ch.isascii():
            return f"{where} is non-ASCII punctuation or a symbol (confusable: use ASCII)"
        if cat.startswith("L"):
            script = _script(ch)
            scripts.add(script)
            letters.append(ch)
            if script == "LATIN" and not _latin_ok(ch):
                return f"{where} looks like an ASCII letter but is not one (confusable)"
        elif cat.startswith("M") and all(_script(c) == "LATIN" for c in letters[-1:]):
            return f"{where} is a combining mark on a Latin letter with no composed form"
    if len(scripts) > 1:
        return "the name mixes scripts (" + ", ".join(sorted(scripts)) + "): confusable"
    if scripts and scripts != {"LATIN"} and letters and all(
            c in _LATIN_LOOKALIKES for c in letters):
        return (f"every letter is a {next(iter(scripts)).title()} letter that looks Latin: "
                "confusable with an ASCII name")
    return None


def normalise_name(value, *, file: str | None, key: str) -> str:
    """The NFKC form of a regime or policy name; InputError naming ``file`` and ``key`` when
    it is not a string or :func:`name_problem` refuses it."""
    if not isinstance(value, str):
        raise InputError(f"{key} must be a string, got {type(value).__name__}", file=file,
                         column=key, fix=f"write {key} as a plain name")
    norm = unicodedata.normalize("NFKC", value)
    why = name_problem(norm)
    if why is not None:
        raise InputError(f"{key} {value!r} is refused: {why}", file=file, column=key,
                         fix="use a name of visible characters of one script (ASCII letters, "
                             "digits, '_', '-', '.'); a name that looks like another is "
                             "another claim in disguise")
    return norm


def name_key(name: str) -> str:
    """The key two names are compared by: NFKC of the case-folded NFKC form (``Bursty``,
    ``BURSTY`` and ``ｂｕｒｓｔｙ`` share the key ``bursty``)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def refuse_case_twins(names, *, file: str | None, key: str) -> None:
    """InputError naming both spellings when two distinct names of ``names`` (already
    normalised; anything but a string, a missing value, skipped) differ only in case."""
    seen: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str):
            continue
        first = seen.setdefault(name_key(name), name)
        if first != name:
            a, b = sorted((first, name))
            raise InputError(f"{key} {a!r} and {b!r} differ only in case: names are compared "
                             "after case folding, so they would be one claim under two "
                             "spellings", file=file, column=key,
                             fix=f"spell every run's {key} the same way (rename one of them)")


FILE_PART_LIMIT = 40      # characters of a name kept in a figure file name


def file_part(name: str, limit: int = FILE_PART_LIMIT) -> str:
    """A file-name-safe, length-capped part for ``name``: the name itself when it is short
    and safe, else a readable prefix plus a hash of the full name (distinct names stay
    distinct; a 5,000-character policy name still gives a short file name)."""
    name = str(name)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "x"
    if slug == name and len(slug) <= limit:
        return slug
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{slug[:limit].rstrip('-.')}-{digest}"


# Names a runs directory keeps for itself: a run directory of such a name would displace the
# store's own file (``--run-id plan.json`` moved the frozen plan aside) or be taken for one
# (a directory named run.json makes the store look like a single run).  Hidden names (".x":
# sweep locks, unfinished writes, copies moved aside) are refused as a class.
RESERVED_STORE_NAMES = ("plan.json", "run.json", ".", "..")
RESERVED_STORE_PREFIX = "."


def reserved_name_problem(name: str) -> str | None:
    """Why ``name`` may not name a directory in a runs directory, or None."""
    if name in RESERVED_STORE_NAMES or name.lower() in RESERVED_STORE_NAMES:
        return f"{name!r} is one of the runs directory's own names"
    if name.startswith(RESERVED_STORE_PREFIX):
        return (f"{name!r} starts with '.': hidden names belong to the store (lock files, "
                "unfinished writes, runs moved aside) and are never read as runs")
    if name.lower().endswith(".lock"):
        return f"{name!r} ends in '.lock': lock files belong to the store"
    return None


def reserved_names_text() -> str:
    """The reserved names, as an error's fix lists them."""
    listed = ", ".join(n for n in RESERVED_STORE_NAMES if n not in (".", ".."))
    return (f"reserved in a runs directory: {listed}, any name ending in '.lock' and any "
            f"name starting with '{RESERVED_STORE_PREFIX}'; choose another name")
