"""Counted nouns in operator output: "1 route", "2 routes"."""

from __future__ import annotations


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
