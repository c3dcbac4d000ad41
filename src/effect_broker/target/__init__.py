"""The target kit: what a Python service on PostgreSQL runs to be ``transactional``.

The service stores each attempt's response as a receipt in the same transaction as its
mutation, under the attempt key the proxy sent; the kit's lookup and tombstone endpoints
let the proxy prove, after a lost answer, whether that attempt committed or never will.
``protocol`` is the wire format, shared with the proxy and free of dependencies.
"""
