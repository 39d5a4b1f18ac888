"""The reviewer's challenge (evalkit/runlog/challenge.py): what the commitment covers, and a
plan frozen under a challenge checked against it, on small hand-made plans."""

from __future__ import annotations

import copy

from evalkit.runlog.challenge import (apply_challenge, commitment, derivation_faults,
                                      issue_challenge)


def _plan(seeds=(3, 1, 2)):
    runs = [{"run_id": f"{role}-{label}-s{s}", "regime": "r", "role": role, "policy": label,
             "seed": s, **({"matched_to": "wa", "draw": 0} if role == "matched_random" else {})}
            for s in seeds for role, label in (("policy", "wa"), ("matched_random", "wa"))]
    return {"created_at": "2026-01-01T00:00:00Z", "protocol": {"content_sha256": "p" * 64},
            "campaign": {"sha256": "c" * 64, "settings": {"seeds": list(seeds)}},
            "runs": runs}


def test_the_commitment_ignores_only_what_is_derived_or_incidental():
    plan = _plan()
    same = copy.deepcopy(plan)
    same["created_at"] = "2027-05-05T00:00:00Z"
    same["campaign"]["settings"]["seeds"] = [1, 2, 3]
    same["runs"] = [{**r, "rng_seed": 7} for r in reversed(same["runs"])]
    assert commitment("n", same) == commitment("n", plan)
    other = copy.deepcopy(plan)
    other["runs"][2]["policy"] = "home_made"
    assert commitment("n", other) != commitment("n", plan)
    assert commitment("m", plan) != commitment("n", plan)


def test_a_plan_frozen_under_a_challenge_follows_from_it_and_edits_show():
    challenge = issue_challenge("c" * 64, "diloco-slo", "p" * 64)
    frozen = apply_challenge(_plan(), challenge)
    assert derivation_faults(frozen) == []
    assert sorted(frozen["campaign"]["settings"]["seeds"]) == [1, 2, 3]
    assert [int(r["seed"]) for r in frozen["runs"]][::2] == frozen["campaign"]["settings"]["seeds"]
    moved = copy.deepcopy(frozen)
    moved["runs"][0]["rng_seed"] += 1
    assert derivation_faults(moved) == [
        f"1 run(s) have an RNG seed the commitment does not derive (first: "
        f"{moved['runs'][0]['run_id']})"]
    edited = copy.deepcopy(frozen)
    edited["runs"][1]["policy"] = "home_made"
    assert any("is not sha256(nonce, plan content)" in f for f in derivation_faults(edited))
    assert derivation_faults(_plan()) == ["the plan records no challenge nonce"]


def test_a_written_challenge_reads_back_and_a_field_edited_away_is_named(tmp_path):
    import json

    import pytest

    from evalkit.errors import InputError
    from evalkit.runlog.challenge import load_challenge, write_challenge

    challenge = issue_challenge("c" * 64, "diloco-slo", "e" * 64)
    path = write_challenge(challenge, tmp_path / "challenge.json")
    assert load_challenge(path) == challenge
    with pytest.raises(InputError, match="exists already"):
        write_challenge(challenge, path)
    for field, column in (("issued_at", "issued_at"), ("nonce", "nonce"),
                          ("protocol", "protocol")):
        edited = tmp_path / f"no_{field}.json"
        edited.write_text(json.dumps({k: v for k, v in challenge.items() if k != field}))
        with pytest.raises(InputError) as err:
            load_challenge(edited)
        assert err.value.column == column and err.value.file == str(edited)
