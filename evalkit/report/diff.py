"""What moved between two audits: per claim, the tier, the verdict, G with its CI and p.

Pure functions on two ``audit.json`` dictionaries; ``evalkit diff`` prints the result and
``evalkit gate --baseline`` uses :func:`evalkit.document.tiers.tier_drops` to fail a build whose
claims fell below an earlier audit's tiers.  Claims are matched by (regime, policy).  Tiers are
ranked by the newer audit's protocol; a tier the newer protocol does not know cannot be ranked
and is reported as such (``gate --baseline`` then refuses with exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalkit.document.rules import protocol_change
from evalkit.document.tiers import tier_rank
from evalkit.document.words import p_value, pp
from evalkit.report.text import md, md_name, shorten

__all__ = ["DOWN", "GONE", "NEW", "SAME", "UP", "diff_audits"]

UP, DOWN, SAME, NEW, GONE, UNRANKED = "up", "down", "same", "new", "gone", "unranked"


def tier_order(audit: dict) -> list[str]:
    return [str(t.get("name")) for t in audit.get("protocol", {}).get("tiers", [])
            if isinstance(t, dict)]


@dataclass
class ClaimMove:
    regime: str
    policy: str
    old: dict | None
    new: dict | None
    tier_move: str                       # up / down / same / new / gone / unranked

    def _get(self, side: dict | None, key: str):
        return None if side is None else side.get(key)

    @property
    def name(self) -> str:
        return f"{self.regime}/{self.policy}"

    @property
    def tiers(self) -> tuple:
        return self._get(self.old, "tier"), self._get(self.new, "tier")

    @property
    def verdicts(self) -> tuple:
        return self._get(self.old, "verdict"), self._get(self.new, "verdict")

    def g_text(self, side) -> str:
        if side is None:
            return "absent"
        g, ci = side.get("mean_diff"), side.get("ci")
        text = f"{pp(g)} pp" if g is not None else "n/a"
        if ci and len(ci) == 2 and None not in ci:
            text += f" [{pp(ci[0])}, {pp(ci[1])}]"
        return text

    def p_text(self, side) -> str:
        return "absent" if side is None else p_value(side.get("p_adjusted"))

    @property
    def moved(self) -> dict:
        """Fields whose shown value changed: name -> (old text, new text)."""
        out = {}
        t_old, t_new = self.tiers
        if self.tier_move != SAME:
            out["tier"] = (t_old or "no tier", t_new or "no tier")
        v_old, v_new = self.verdicts
        if v_old != v_new:
            out["verdict"] = (v_old or "absent", v_new or "absent")
        for key, fn in (("G", self.g_text), ("p", self.p_text)):
            a, b = fn(self.old), fn(self.new)
            if a != b:
                out[key] = (a, b)
        return out


@dataclass
class AuditDiff:
    moves: list[ClaimMove]
    notes: list[str] = field(default_factory=list)
    protocol_changed: str | None = None  # why the rules differ (content hash), or None

    def drops(self) -> list[ClaimMove]:
        return [m for m in self.moves if m.tier_move in (DOWN, GONE)]

    def format_text(self, old_label: str = "old", new_label: str = "new") -> str:
        lines = [f"evalkit diff: {old_label} -> {new_label}"]
        lines += [f"note: {n}" for n in self.notes]
        moved = [m for m in self.moves if m.moved]
        lines.append(f"{len(moved)} of {len(self.moves)} claim(s) moved")
        for m in self.moves:
            changes = m.moved
            if not changes:
                lines.append(f"  {shorten(m.name, 100)}: unchanged (tier {m.tiers[1] or 'none'}, "
                             f"G {m.g_text(m.new)}, p {m.p_text(m.new)})")
                continue
            head = f"  {shorten(m.name, 100)}:"
            if m.tier_move in (UP, DOWN, NEW, GONE, UNRANKED):
                head += f" {m.tier_move.upper()}"
            lines.append(head)
            for key, (a, b) in changes.items():
                lines.append(f"    {key}: {shorten(a, 300)} -> {shorten(b, 300)}")
        return "\n".join(lines) + "\n"

    def format_markdown(self, old_label: str = "old", new_label: str = "new") -> str:
        arrows = {UP: "\u2b06\ufe0f up", DOWN: "\u2b07\ufe0f down", NEW: "\U0001f195 new",
                  GONE: "\u274c gone", UNRANKED: "\u2754 unranked", SAME: ""}
        moved = [m for m in self.moves if m.moved]
        out = [f"### evalkit audit diff: {md(old_label, 60)} \u2192 {md(new_label, 60)}", "",
               f"{len(moved)} of {len(self.moves)} claim(s) moved."]
        for n in self.notes:
            out += ["", f"> {md(n, 300)}"]
        out += ["", "| claim | tier | G [95% CI] | p (adj.) |", "|---|---|---|---|"]

        def cell(m, key, now):
            if key in m.moved:
                a, b = m.moved[key]
                return f"{md(a, 60)} \u2192 **{md(b, 60)}**"
            return md(now, 60)
        for m in self.moves:
            tier = cell(m, "tier", m.tiers[1] or "no tier")
            if arrows.get(m.tier_move):
                tier = f"{arrows[m.tier_move]}: {tier}"
            out.append(f"| {md_name(m.name)} | {tier} | {cell(m, 'G', m.g_text(m.new))} | "
                       f"{cell(m, 'p', m.p_text(m.new))} |")
        verdicts = [m for m in self.moves if "verdict" in m.moved]
        if verdicts:
            out += ["", "Verdicts that changed:", ""]
            for m in verdicts:
                a, b = m.moved["verdict"]
                out.append(f"- **{md_name(m.name)}**: {md(a, 300)} \u2192 {md(b, 300)}")
        return "\n".join(out) + "\n"


def _key(c: dict) -> tuple[str, str]:
    return str(c.get("regime")), str(c.get("policy"))


def diff_audits(old: dict, new: dict) -> AuditDiff:
    order = tier_order(new) or tier_order(old)
    olds = {_key(c): c for c in old.get("claims", [])}
    news = {_key(c): c for c in new.get("claims", [])}
    moves = []
    for key in sorted(set(olds) | set(news)):
        a, b = olds.get(key), news.get(key)
        if a is None:
            move = NEW
        elif b is None:
            move = GONE
        else:
            ra, rb = tier_rank(a.get("tier"), order), tier_rank(b.get("tier"), order)
            if ra is None or rb is None:
                move = SAME if a.get("tier") == b.get("tier") else UNRANKED
            else:
                move = UP if rb > ra else DOWN if rb < ra else SAME
        moves.append(ClaimMove(key[0], key[1], a, b, move))
    notes = []
    po, pn = old.get("protocol", {}), new.get("protocol", {})
    changed = protocol_change(po, pn)
    if changed:
        notes.append(f"{changed}: tiers are ranked by the new protocol")
    elif po.get("sha256") != pn.get("sha256"):
        notes.append("the protocol files' text differs, their rules do not (same content hash)")
    if old.get("alpha") != new.get("alpha"):
        notes.append(f"alpha changed: {old.get('alpha')} -> {new.get('alpha')}")
    fo = (old.get("provenance") or {}).get("input_fingerprint")
    fn = (new.get("provenance") or {}).get("input_fingerprint")
    if fo and fn and fo == fn:
        notes.append("same input fingerprint: the two audits read the same runs")
    return AuditDiff(moves, notes, protocol_changed=changed)
