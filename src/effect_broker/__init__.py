"""effect-broker: a sidecar HTTP proxy that makes side-effecting calls safe to retry."""

__version__ = "0.1.0"
