"""The operator console: HTML pages on the admin port for effects awaiting a person."""

from effect_broker.admin.console.pages import add_console

__all__ = ["add_console"]
