"""The worker's half of OAuth (``HostCredentials``), with the parent played by the test:
one question at a time, a refused older header answered without asking, errors and
renewal times as the host gave them, and frames that never print a secret."""

from __future__ import annotations

import asyncio

import pytest

from conftest import run
from trunkline import channel as ch
from trunkline.errors import AuthorizationFailed
from trunkline.worker.credentials import CredentialSlots, HostCredentials


class Parent:
    """Collects the worker's questions; the test answers them."""

    def __init__(self) -> None:
        self.asked: list[ch.CredentialQuestion] = []

    def __call__(self, data: bytes) -> None:
        kind = data[4]
        assert kind == ch.CREDENTIALS_ASKED
        self.asked.append(ch.CredentialQuestion.from_bytes(data[5:]))


def test_many_refused_requests_make_one_question_and_share_its_answer():
    async def main():
        parent = Parent()
        creds = HostCredentials(parent)
        waiting = [asyncio.create_task(creds.challenged(401, 'Bearer realm="x"', None))
                   for _ in range(20)]
        await asyncio.sleep(0)
        assert len(parent.asked) == 1 and parent.asked[0].status == 401
        assert parent.asked[0].rejected is None
        creds.on_answer(ch.CredentialAnswer(parent.asked[0].key, authorization="Bearer A"))
        await asyncio.gather(*waiting)
        assert creds.header == "Bearer A"
        # A request refused with no header, now that "Bearer A" is held: sent again with
        # it, nobody asked.
        await creds.challenged(401, None, None)
        assert len(parent.asked) == 1
        # Refused with the header held: that one is asked about, saying what was sent.
        task = asyncio.create_task(creds.challenged(403, "Bearer error=\"insufficient_scope\"",
                                                    "Bearer A"))
        await asyncio.sleep(0)
        assert [q.rejected for q in parent.asked] == [None, "Bearer A"]
        creds.on_answer(ch.CredentialAnswer(parent.asked[1].key, authorization="Bearer B"))
        await task
        assert creds.header == "Bearer B"
    run(main())


def test_an_error_answer_fails_each_waiter_with_the_hosts_reason():
    async def main():
        parent = Parent()
        creds = HostCredentials(parent)
        waiting = [asyncio.create_task(creds.challenged(401, None, None)) for _ in range(3)]
        await asyncio.sleep(0)
        creds.on_answer(ch.CredentialAnswer(parent.asked[0].key, error="server 's': refused",
                                            reason="resource_mismatch", issuer="https://as"))
        for task in waiting:
            with pytest.raises(AuthorizationFailed) as failed:
                await task
            assert failed.value.reason == "resource_mismatch"
            assert failed.value.issuer == "https://as" and "refused" in str(failed.value)
        # A stale answer (to no question on its way) changes nothing.
        creds.on_answer(ch.CredentialAnswer(99, authorization="Bearer Z"))
        assert creds.header is None
    run(main())


def test_renewal_is_due_at_the_hosts_time_and_a_renewal_that_changed_nothing_waits():
    async def main():
        now = [1000.0]
        parent = Parent()
        creds = HostCredentials(parent, clock=lambda: now[0])
        task = asyncio.create_task(creds.challenged(401, None, None))
        await asyncio.sleep(0)
        creds.on_answer(ch.CredentialAnswer(1, authorization="Bearer A", renew_at=1030.0))
        await task
        assert not creds.due
        now[0] = 1030.0
        assert creds.due
        task = asyncio.create_task(creds.renew())
        await asyncio.sleep(0)
        assert parent.asked[-1].status is None
        # The host could not renew yet (its authorization server unreachable): same header,
        # same past time; the worker asks again a little later, not before every request.
        creds.on_answer(ch.CredentialAnswer(2, authorization="Bearer A", renew_at=1030.0))
        await task
        assert not creds.due
        now[0] = 1036.0
        assert creds.due
    run(main())


def test_credential_frames_never_print_the_header():
    question = ch.CredentialQuestion(1, status=401, challenge="Bearer", rejected="Bearer s3cr3t")
    answer = ch.CredentialAnswer(1, authorization="Bearer t0k3n", renew_at=5.0,
                                 dpop_key='{"d":"pr1v4t3"}')
    shown = repr(question) + str(question) + repr(answer) + str(answer)
    assert "s3cr3t" not in shown and "t0k3n" not in shown and "<redacted>" in shown
    assert "pr1v4t3" not in shown
    assert ch.CredentialQuestion.from_bytes(question.to_bytes()[5:]) == question


def _claims(proof: str) -> dict:
    import base64
    import json

    body = proof.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def test_a_dpop_bound_header_comes_with_its_key_and_each_request_gets_a_fresh_proof():
    from trunkline.auth.dpop import access_token_hash, generate_key

    async def main():
        parent = Parent()
        creds = HostCredentials(parent, clock=lambda: 1000.0)
        assert creds.proof("POST", "https://rs.example/mcp") is None  # no header yet
        first_key, second_key = generate_key("ES256").reveal(), generate_key("ES256").reveal()
        task = asyncio.create_task(creds.challenged(401, None, None))
        await asyncio.sleep(0)
        creds.on_answer(ch.CredentialAnswer(1, authorization="DPoP tok-1", dpop_key=first_key))
        await task
        proof = creds.proof("POST", "https://rs.example/mcp?x=1")
        assert proof is not None and proof[1] is None
        claims = _claims(proof[0])
        assert claims["htm"] == "POST" and claims["htu"] == "https://rs.example/mcp"
        assert claims["ath"] == access_token_hash("tok-1") and claims["iat"] == 1000
        again = creds.proof("POST", "https://rs.example/mcp")
        assert again is not None and _claims(again[0])["jti"] != claims["jti"]
        # The server's nonce refusal: the request goes again with the nonce, nobody asked.
        assert creds.dpop is not None
        assert creds.dpop.retry(401, 'DPoP error="use_dpop_nonce"', "rs-nonce", None)
        assert len(parent.asked) == 1
        # A new key (a new token) keeps the server's nonce; a Bearer header drops the key.
        task = asyncio.create_task(creds.challenged(401, None, "DPoP tok-1"))
        await asyncio.sleep(0)
        creds.on_answer(ch.CredentialAnswer(2, authorization="DPoP tok-2",
                                            dpop_key=second_key))
        await task
        proof = creds.proof("GET", "https://rs.example/mcp")
        assert proof is not None and proof[1] == "rs-nonce"
        assert _claims(proof[0])["ath"] == access_token_hash("tok-2")
        task = asyncio.create_task(creds.challenged(401, None, "DPoP tok-2"))
        await asyncio.sleep(0)
        creds.on_answer(ch.CredentialAnswer(3, authorization="Bearer tok-3"))
        await task
        assert creds.dpop is None and creds.proof("POST", "https://rs.example/mcp") is None
    run(main())


def test_an_unusable_dpop_key_fails_the_request_without_showing_the_key():
    async def main():
        parent = Parent()
        creds = HostCredentials(parent)
        task = asyncio.create_task(creds.challenged(401, None, None))
        await asyncio.sleep(0)
        creds.on_answer(ch.CredentialAnswer(1, authorization="DPoP tok",
                                            dpop_key="{not json pr1v4t3"))
        with pytest.raises(AuthorizationFailed) as failed:
            await task
        assert failed.value.reason == "dpop_key" and "pr1v4t3" not in str(failed.value)
        assert creds.header is None


# ---------------------------------------------------------------------------- slots (issue 41)


def test_each_slot_asks_for_itself_first_and_a_refusal_asks_for_that_slot_only():
    async def main():
        parent = Parent()
        slots = CredentialSlots(parent)
        alice, bob = slots.slot(7), slots.slot(9)
        assert alice is not None and bob is not None and slots.slot(7) is alice
        # A new identity's slot asks before its first request, not after a 401.
        assert alice.due and bob.due and slots.shared is not None and not slots.shared.due
        asked = [asyncio.create_task(alice.renew()), asyncio.create_task(bob.renew())]
        await asyncio.sleep(0)
        assert [(q.slot, q.status) for q in parent.asked] == [(7, None), (9, None)]
        assert len({q.key for q in parent.asked}) == 2, "keys are unique across slots"
        for q, token in zip(parent.asked, ("Bearer alice", "Bearer bob"), strict=True):
            slots.on_answer(ch.CredentialAnswer(q.key, authorization=token, slot=q.slot))
        await asyncio.gather(*asked)
        assert (alice.header, bob.header) == ("Bearer alice", "Bearer bob")
        # Alice's header is refused: her slot asks; Bob's is not touched.
        task = asyncio.create_task(alice.challenged(401, "Bearer", "Bearer alice"))
        await asyncio.sleep(0)
        assert [(q.slot, q.rejected) for q in parent.asked[2:]] == [(7, "Bearer alice")]
        # An answer naming another slot than its question's is not taken.
        slots.on_answer(ch.CredentialAnswer(parent.asked[2].key, authorization="Bearer x",
                                            slot=9))
        assert alice.asking and bob.header == "Bearer bob"
        slots.on_answer(ch.CredentialAnswer(parent.asked[2].key, authorization="Bearer alice2",
                                            slot=7))
        await task
        assert (alice.header, bob.header) == ("Bearer alice2", "Bearer bob")
    run(main())


def test_slots_are_bounded_and_a_dropped_slot_still_gets_its_answer():
    async def main():
        parent = Parent()
        slots = CredentialSlots(parent, max_slots=2)
        first = slots.slot(1)
        assert first is not None
        waiting = asyncio.create_task(first.renew())
        await asyncio.sleep(0)
        second, third = slots.slot(2), slots.slot(3)
        # The bound holds; the least recently used idle slot went (slot 1 is asking).
        assert len(slots) == 2 and slots.slot(1) is first and slots.slot(2) is not second
        for n in range(4, 50):
            slots.slot(n)
        assert len(slots) == 2
        assert slots.slot(3) is not third
        # Slot 1, asking all along, was kept; its answer reaches it by its key.
        slots.on_answer(ch.CredentialAnswer(parent.asked[0].key, authorization="Bearer one",
                                            slot=1))
        await waiting
        assert first.header == "Bearer one"
    run(main())


def test_a_forgotten_slot_drops_its_header_and_fails_its_waiters():
    async def main():
        parent = Parent()
        slots = CredentialSlots(parent, shared=False)
        assert slots.shared is None and slots.slot(0) is None
        alice = slots.slot(5)
        assert alice is not None
        task = asyncio.create_task(alice.renew())
        await asyncio.sleep(0)
        slots.on_answer(ch.CredentialAnswer(parent.asked[0].key, authorization="Bearer a",
                                            slot=5))
        await task
        waiting = asyncio.create_task(alice.challenged(401, None, "Bearer a"))
        await asyncio.sleep(0)
        slots.forget([5, 0, 99])
        with pytest.raises(AuthorizationFailed) as failed:
            await waiting
        assert failed.value.reason == "withdrawn"
        assert alice.header is None and alice.forgotten and not alice.due
        # Nothing is ever asked for it again; the number's next request starts afresh.
        with pytest.raises(AuthorizationFailed):
            await alice.challenged(401, None, None)
        again = slots.slot(5)
        assert again is not alice and again is not None and again.header is None and again.due
        # The late answer to the forgotten question reaches nobody.
        slots.on_answer(ch.CredentialAnswer(parent.asked[1].key, authorization="Bearer a2",
                                            slot=5))
        assert again.header is None
    run(main())
