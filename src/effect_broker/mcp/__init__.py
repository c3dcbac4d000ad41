"""MCP (Streamable HTTP) as a route kind, and the management server for MCP clients.

``jsonrpc`` and ``tools_schema`` are pure (no I/O); ``answers`` tells the engine what a
JSON-RPC answer proves; ``handler`` is the adapter between the transport and the engine;
``management`` serves the admin API's read and reconcile operations as MCP tools.
"""
