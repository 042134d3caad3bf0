"""The worker side of the process boundary: everything here runs in a worker process,
one per configured server (``python -m trunkline.worker``), and owns that server's
connection: its transport, its era verdict, its pending request ids. The parent never
imports this package; the two sides share only ``trunkline.channel`` and the value types
it carries."""
