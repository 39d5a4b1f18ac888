"""A protocol's rules apart from its labels: the content hash and what changed between two."""

from __future__ import annotations

from evalkit.document.rules import content_sha256, protocol_change, rule_differences, rules_of


def _protocol(**changes) -> dict:
    base = {"name": "p", "version": "1", "description": "words", "source": "a.toml",
            "sha256": "f" * 64, "alpha": 0.05,
            "tiers": [{"name": "harness", "claim": "text", "checks": ["pairing"]},
                      {"name": "deployable", "claim": "more text", "checks": ["drift"]}],
            "checks": {"pairing": {"description": "d", "on_unevaluable": "fail"},
                       "drift": {"description": "e", "max_share": 0.01}}}
    base.update(changes)
    return base


def test_labels_are_not_rules():
    rules = rules_of(_protocol())
    assert not {"name", "version", "description", "source", "sha256"} & set(rules)
    assert rules["tiers"][0] == {"name": "harness", "checks": ["pairing"]}
    assert rules["checks"]["drift"] == {"max_share": 0.01}
    relabelled = _protocol(name="q", version="9", description="other", source="b.toml")
    relabelled["tiers"][0]["claim"] = "new claim text"
    relabelled["checks"]["pairing"]["description"] = "new description"
    assert content_sha256(relabelled) == content_sha256(_protocol())


def test_a_changed_rule_changes_the_hash_and_is_named():
    moved = _protocol(alpha=0.1)
    assert content_sha256(moved) != content_sha256(_protocol())
    assert rule_differences(_protocol(), moved) == ["alpha: 0.05 -> 0.1"]
    dropped = _protocol(checks={"pairing": {"on_unevaluable": "fail"}})
    assert rule_differences(_protocol(), dropped) == ["checks.drift.max_share removed (was 0.01)"]
    assert rule_differences(dropped, _protocol()) == ["checks.drift.max_share added (0.01)"]


def test_the_tier_order_is_a_rule():
    swapped = _protocol()
    swapped["tiers"] = swapped["tiers"][::-1]
    assert content_sha256(swapped) != content_sha256(_protocol())
    assert rule_differences(_protocol(), swapped) == [
        "tier_order: ['harness', 'deployable'] -> ['deployable', 'harness']"]


def test_differences_list_six_then_count_the_rest():
    many = _protocol(**{f"k{i}": i for i in range(8)})
    lines = rule_differences(_protocol(), many)
    assert lines[:6] == [f"k{i} added ({i})" for i in range(6)] and lines[6:] == ["(+2 more)"]
    assert len(rule_differences(_protocol(), _protocol(**{f"k{i}": i for i in range(6)}))) == 6


def test_protocol_change_is_none_for_the_same_rules_and_names_the_change_otherwise():
    assert protocol_change(_protocol(), _protocol(description="reworded")) is None
    same_label = protocol_change(_protocol(), _protocol(alpha=0.1))
    assert same_label.startswith(f"the protocol's rules changed (content sha256 "
                                 f"{content_sha256(_protocol())[:12]} -> "
                                 f"{content_sha256(_protocol(alpha=0.1))[:12]}")
    assert "; same name and version): alpha: 0.05 -> 0.1" in same_label
    renamed = protocol_change(_protocol(), _protocol(alpha=0.1, version="2"))
    assert "; p v1 -> p v2): alpha: 0.05 -> 0.1" in renamed


def test_the_hash_is_always_recomputed_from_the_rules():
    old = _protocol(content_sha256=content_sha256(_protocol()))
    assert protocol_change(old, _protocol()) is None                    # computed for new
    stale = _protocol(content_sha256="0" * 64)       # an edited hash hides no rule and adds none
    assert protocol_change(stale, _protocol()) is None
    loosened = _protocol(alpha=0.5)
    forged = _protocol(content_sha256=content_sha256(loosened))
    assert protocol_change(forged, loosened) is not None
