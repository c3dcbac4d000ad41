"""effect-broker: a sidecar HTTP proxy that makes side-effecting calls safe to retry."""

# The one place the version is written: the build reads it from here.
__version__ = "0.1.0"
