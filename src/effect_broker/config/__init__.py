"""What the operator configured: routes.yaml, its contracts and routing, and settings.

The lowest layer with behaviour: it imports nothing but the shared values, so the engine,
the proxy and the CLI can all read configuration without pulling each other in.
"""
