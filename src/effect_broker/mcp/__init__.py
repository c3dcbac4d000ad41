"""MCP (Streamable HTTP) as a route kind, and the management server for MCP clients.

``jsonrpc``, ``tools_schema`` and ``inflight`` are pure (no I/O); ``answers`` tells the
engine what a JSON-RPC answer proves; ``handler`` is the adapter between the transport
and the engine (``inflight`` lets it withhold cancellations of the calls it records);
``management`` serves the admin API's read and reconcile operations as MCP tools.
"""
