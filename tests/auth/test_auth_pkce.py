"""PKCE S256 and state."""

from __future__ import annotations

import re

from trunkline.auth.pkce import new_pkce, new_state, s256


def test_s256_matches_rfc_7636_appendix_b() -> None:
    assert s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == (
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")


def test_a_new_pair_is_a_43_character_verifier_and_its_challenge() -> None:
    pair = new_pkce()
    verifier = pair.verifier.reveal()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", verifier)
    assert pair.challenge == s256(verifier) and pair.method == "S256"
    assert verifier not in repr(pair)


def test_pairs_and_states_are_fresh_every_time() -> None:
    verifiers = {new_pkce().verifier.reveal() for _ in range(100)}
    states = {new_state() for _ in range(100)}
    assert len(verifiers) == 100 and len(states) == 100
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{43}", s) for s in states)
