"""The admin port: health, readiness, and (later) effects for operators."""
