"""The gateway: the whole fleet as one MCP server (``trunkline serve``).

A layer above the Host API and nothing below it: it adds no router, catalog or retry
policy of its own. ``protocol`` is its pure half (what a downstream message is, the
answers that need nothing behind the gateway), ``session`` one client over one
connection, ``stdio`` the face a desktop client's ``mcpServers`` entry starts."""
