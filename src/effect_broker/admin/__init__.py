"""The admin port: health, readiness, metrics, and effects for operators."""
