"""A server's answer to one request, as it crosses from the worker to the caller.

A result stays undecoded bytes until whoever finally needs it decodes it, once; errors
are rare and small, and arrive decoded. Both processes build ``Reply`` values: the worker
for its own requests, the parent from RESULT frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .._codec import (
    KIND_ERROR,
    KIND_RESULT,
    RT_ABSENT,
    RT_COMPLETE,
    RT_INPUT_REQUIRED,
    CodecError,
    Event,
    loads_text,
)
from ..errors import MalformedMessage, ServerError

#: RESULT frame ``result_type`` codes (the codec's) -> ``resultType``; any other value
#: reads as ``"other"``. Absent stays None: the caller decides what absence means.
RESULT_TYPES: dict[int, str | None] = {
    RT_ABSENT: None,
    RT_COMPLETE: "complete",
    RT_INPUT_REQUIRED: "input_required",
}


@dataclass(slots=True)
class Reply:
    result: bytes | None
    result_type: str | None
    error_code: int | None = None
    error_message: str | None = None
    error_data: Any = None

    @property
    def is_error(self) -> bool:
        return self.error_code is not None

    def decode(self, *, server: str | None = None, method: str | None = None) -> Any:
        """The decoded result, or ``ServerError`` for a JSON-RPC error."""
        if self.error_code is not None:
            raise ServerError(
                self.error_message or "error", code=self.error_code, data=self.error_data,
                server=server, method=method,
            )
        assert self.result is not None
        return decoded_result(self.result, server, method)

    @classmethod
    def from_event(cls, event: Event) -> Reply:
        """From a scanned response line (result bytes sliced, error fields decoded)."""
        if event.kind == KIND_ERROR:
            return cls(None, None, event.error_code, event.error_message,
                       decode_error_data(event.error_data))
        return cls(event.result, event.result_type)

    @classmethod
    def from_frame(cls, kind: int, result_type: int, payload: bytes, *, server: str,
                   method: str) -> Reply:
        """From a RESULT frame: the raw ``result`` value, or the whole error line."""
        if kind == KIND_RESULT:
            return cls(payload, RESULT_TYPES.get(result_type, "other"))
        try:
            error = orjson.loads(payload)["error"]
            return cls(None, None, int(error["code"]), str(error.get("message", "")),
                       error.get("data"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise MalformedMessage(f"error response did not decode: {exc}",
                                   server=server, method=method) from exc


#: Results at least this long are offered to the codec's decoder first.
LONG_RESULT_BYTES = 4096
_DECLINED = object()


def decode_result(raw: bytes) -> Any:
    """A result's JSON value. A long one is offered to the codec's decoder first: where
    the result is mostly long ASCII text (the usual tool result), it decodes several
    times faster than orjson; it declines any other document early, which orjson then
    decodes (so each kind of result gets the faster of the two)."""
    if len(raw) >= LONG_RESULT_BYTES:
        value = loads_text(raw, _DECLINED)
        if value is not _DECLINED:
            return value
    return orjson.loads(raw)


def decoded_result(raw: bytes, server: str | None, method: str | None) -> Any:
    """``decode_result``, a document that does not decode reported as ``MalformedMessage``
    of ``server``'s answer to ``method``."""
    try:
        return decode_result(raw)
    except (orjson.JSONDecodeError, CodecError) as exc:
        raise MalformedMessage(
            f"result is not valid JSON: {exc}", server=server, method=method
        ) from exc


def decode_error_data(raw: bytes | None) -> Any:
    """``error.data`` as JSON, or its text when it does not decode (the scan validated the
    envelope, not every byte of nested values)."""
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")
