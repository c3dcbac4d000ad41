"""routes.yaml text to plain data, remembering the line of every key and value.

pydantic validates plain dicts and lists and reports a location such as
``("contracts", 0, "timeout")``; an operator needs ``routes.yaml:7``. So the file is
composed into YAML nodes once, turned into plain data here, and every path into that data
keeps the line its node started on. A location pydantic reports for something absent (a
missing field) falls back to the nearest enclosing node that exists.

Plain ``yaml.safe_load`` would also silently keep the last of two equal keys; a routes
file with two ``safety:`` lines must be refused instead, so duplicates are found here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import yaml
from yaml.constructor import SafeConstructor

from effect_broker.errors import ConfigError, ConfigIssue

FILE_FIELD = "(file)"
TOP_LEVEL_FIELD = "(top level)"

DataPath = tuple[str | int, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """A parsed file: its data, and the line of each value and key by path."""

    source: str
    data: object
    value_lines: Mapping[DataPath, int]
    key_lines: Mapping[DataPath, int]
    issues: tuple[ConfigIssue, ...]  # duplicate or non-string keys, recursive aliases

    def line(self, path: Sequence[str | int]) -> int | None:
        """The line of the value at ``path``, else of its nearest existing ancestor."""
        for end in range(len(path), -1, -1):
            line = self.value_lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def key_line(self, path: Sequence[str | int]) -> int | None:
        """The line of the key that introduces ``path`` (a value may start lower)."""
        return self.key_lines.get(tuple(path)) or self.line(path)

    def has(self, path: Sequence[str | int]) -> bool:
        return tuple(path) in self.value_lines


def read_yaml(text: str, *, source: str) -> YamlDocument:
    """Compose ``text``; a syntax error or an empty file is a one-issue ConfigError."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([_syntax_issue(exc, source)]) from None
    if root is None:
        raise ConfigError([ConfigIssue(source, None, FILE_FIELD, "the file is empty")])
    reader = _Reader(source)
    data = reader.value(root, ())
    return YamlDocument(
        source=source,
        data=data,
        value_lines=reader.value_lines,
        key_lines=reader.key_lines,
        issues=tuple(reader.issues),
    )


def field_label(path: Iterable[str | int]) -> str:
    """``("contracts", 0, "probe", "path")`` -> ``contracts[0].probe.path``."""
    label = ""
    for part in path:
        if isinstance(part, int):
            label += f"[{part}]"
        else:
            label = f"{label}.{part}" if label else part
    return label or TOP_LEVEL_FIELD


def describe(value: object) -> str:
    """A value as a person reads it in the file: ``the string 'five'``, ``a list``."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "an empty string" if not value.strip() else f"the string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"{value!r} ({type(value).__name__})"


def _syntax_issue(exc: yaml.YAMLError, source: str) -> ConfigIssue:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} started at line {context_mark.line + 1})"
    if "'{'" in problem or "'}'" in problem:
        problem += '; quote values that contain { or }, e.g. path: "/v1/charges/{id}"'
    return ConfigIssue(source, line, FILE_FIELD, f"invalid YAML: {problem}")


def _line_of(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _Reader:
    """Walks composed nodes into plain data, recording lines and key problems."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.value_lines: dict[DataPath, int] = {}
        self.key_lines: dict[DataPath, int] = {}
        self.issues: list[ConfigIssue] = []
        self._constructor = SafeConstructor()
        self._open: set[int] = set()  # nodes being read: an alias back into one loops

    def value(self, node: yaml.Node, path: DataPath) -> object:
        self.value_lines[path] = _line_of(node)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if id(node) in self._open:
            self.report(node, path, "an alias refers to a node that contains it")
            return None
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [
                    self.value(item, (*path, index))
                    for index, item in enumerate(node.value)
                ]
            return self.mapping(cast(yaml.MappingNode, node), path)
        finally:
            self._open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, path: DataPath) -> dict[str, object]:
        found: dict[str, object] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:  # a merged field would have no line of its own
                message = "merge keys (<<) are not supported; write the fields out"
                self.report(key_node, (*path, "<<"), message)
                continue
            key = self.scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                got = describe(key) if key is not None else "a mapping or list"
                self.report(key_node, path, f"keys are strings, got {got}")
                continue
            child = (*path, key)
            if key in found:
                first = self.key_lines[child]
                self.report(key_node, child, f"duplicate key (first at line {first})")
                continue
            self.key_lines[child] = _line_of(key_node)
            found[key] = self.value(value_node, child)
        return found

    def scalar(self, node: yaml.ScalarNode) -> object:
        try:
            return cast(object, self._constructor.construct_object(node, deep=True))
        except yaml.YAMLError as exc:
            return f"{node.value} ({getattr(exc, 'problem', None) or exc})"

    def report(self, node: yaml.Node, path: DataPath, message: str) -> None:
        self.issues.append(
            ConfigIssue(self.source, _line_of(node), field_label(path), message)
        )
