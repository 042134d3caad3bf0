"""``CallToolResult`` and ``CallInput``: immutable values whose construction costs little
(msgspec Structs), with the contract a frozen dataclass gave."""

import pickle

import msgspec
import pytest

from trunkline import CallInput, CallToolResult


def _result(**kw):
    raw = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    return CallToolResult(content=raw["content"], tool="echo", server="s", raw=raw, **kw)


def test_a_result_is_immutable_and_compared_by_value():
    result = _result()
    with pytest.raises(AttributeError):
        result.is_error = True  # type: ignore[misc]  # frozen: it must raise
    assert result == _result()
    assert result != _result(is_error=True)
    assert pickle.loads(pickle.dumps(result)) == result
    assert msgspec.structs.replace(result, tool="other").tool == "other"


def test_a_result_reads_as_before():
    result = _result(structured_content={"n": 1})
    assert result.text == "a\nb"
    assert (result.is_error, result.meta, result.structured_content) == (False, None, {"n": 1})
    assert "raw=" not in repr(result) and "tool='echo'" in repr(result)
    assert CallToolResult(content=[]).raw == {}
    assert CallToolResult(content=[]).raw is not CallToolResult(content=[]).raw


def test_call_input_defaults_are_its_own():
    first, second = CallInput(), CallInput()
    assert first.handlers == {} and first.handlers is not second.handlers
    assert CallInput(relay=True, responses={"a": {}}, request_state="s").continuation() == {
        "inputResponses": {"a": {}}, "requestState": "s"}
    with pytest.raises(AttributeError):
        first.relay = True  # type: ignore[misc]  # frozen: it must raise
