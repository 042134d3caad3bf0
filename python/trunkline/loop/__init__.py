"""Event-loop helpers both processes use: writes coalesced per tick (``batching``), one
timer for many deadlines (``deadlines``), structured task scopes (``tasks``) and
awaitables of an outcome already decided (``awaitables``)."""
