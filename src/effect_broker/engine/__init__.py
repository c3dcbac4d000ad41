"""The engine: every decision about an effect and every ledger write, in one place.

The request path, the reconciler and the admin API are adapters that call it; none of
them writes the ledger itself.
"""
