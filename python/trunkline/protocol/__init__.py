"""Pure protocol logic: no I/O. Era negotiation, identity stamping, result checks."""

from .era import (
    Abandon,
    Closed,
    Decide,
    Era,
    EraNegotiation,
    ErrorReplied,
    Fail,
    NegotiationConfig,
    Probe,
    Refusal,
    Replied,
    SendDiscover,
    SendInitialize,
    SendInitialized,
    TimedOut,
    Unexpected,
    Verdict,
)
from .identity import ClientIdentity
from .versions import LEGACY_VERSIONS, MODERN_VERSIONS

__all__ = [
    "LEGACY_VERSIONS",
    "MODERN_VERSIONS",
    "Abandon",
    "ClientIdentity",
    "Closed",
    "Decide",
    "Era",
    "EraNegotiation",
    "ErrorReplied",
    "Fail",
    "NegotiationConfig",
    "Probe",
    "Refusal",
    "Replied",
    "SendDiscover",
    "SendInitialize",
    "SendInitialized",
    "TimedOut",
    "Unexpected",
    "Verdict",
]
