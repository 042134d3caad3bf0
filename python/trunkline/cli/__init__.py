"""The ``trunkline`` command line (``commands``: ``demo``, ``probe``, ``tools``, ``call``,
``serve``, ``status``, ``login``, ``pins``) and what only it uses: ``progress`` (server
states as a fleet comes up), ``status_view`` (``trunkline status``) with ``interrupt``
(its Ctrl-C) and ``output`` (its output, written from the loop), ``login`` and ``pins``.

``serve`` fills in a ``gateway.serve.GatewaySettings`` from its arguments and runs it."""

from .commands import main

__all__ = ["main"]
