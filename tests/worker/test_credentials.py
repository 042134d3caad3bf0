"""The worker's half of OAuth (``HostCredentials``), with the parent played by the test:
one question at a time, a refused older header answered without asking, errors and
renewal times as the host gave them, and frames that never print a secret."""

from __future__ import annotations

import asyncio

import pytest

from conftest import run
from trunkline import channel as ch
from trunkline.errors import AuthorizationFailed
from trunkline.worker.credentials import HostCredentials


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
    answer = ch.CredentialAnswer(1, authorization="Bearer t0k3n", renew_at=5.0)
    shown = repr(question) + str(question) + repr(answer) + str(answer)
    assert "s3cr3t" not in shown and "t0k3n" not in shown and "<redacted>" in shown
    assert ch.CredentialQuestion.from_bytes(question.to_bytes()[5:]) == question
