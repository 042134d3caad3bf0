"""Reading what an authorization server answers: JSON objects, and OAuth error responses
(RFC 6749 §5.2). Pure.

Rules:

- A body is used only if it is a JSON object; anything else reads as ``None`` and the
  caller says, in its own words, which answer was not one.
- An error answer is quoted only by its ``error`` code and a bounded ``error_description``
  (the server's words about the failure). A body as a whole is never quoted in an error or
  a log: a token response carries tokens.
"""

from __future__ import annotations

import json
from typing import Any

_MAX_CODE = 80
_MAX_DESCRIPTION = 200


def json_object(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def oauth_error(body: bytes) -> tuple[str | None, str]:
    """The ``error`` code of an OAuth error answer (``None`` if it is not one), and a short
    text to quote: ``"invalid_grant (refresh token expired)"``, or ``""``."""
    doc = json_object(body)
    code = doc.get("error") if doc else None
    if not isinstance(code, str) or not code:
        return None, ""
    code = _printable(code)[:_MAX_CODE]
    text = code
    description = doc.get("error_description") if doc else None
    if isinstance(description, str) and description:
        text += f" ({_printable(description)[:_MAX_DESCRIPTION]})"
    return code, text


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text)
