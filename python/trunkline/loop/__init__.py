"""Event-loop helpers both processes use: writes coalesced per tick (``batching``), one
timer for many deadlines (``deadlines``), and structured task scopes (``tasks``)."""
