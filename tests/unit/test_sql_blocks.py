"""Named query blocks in queries.sql, and the pure parts of the migration runner."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from types import SimpleNamespace

import pytest

from effect_broker.errors import MigrationError
from effect_broker.store import migrations as migrations_module
from effect_broker.store.migrations import Migration, _pending, load_migrations
from effect_broker.store.sql import parse_query_blocks, queries

# --- parse_query_blocks -----------------------------------------------------------------

SAMPLE = """\
-- A preamble that belongs to no block.
-- It may span lines.

-- first_query --
-- Fetch one thing.
SELECT * FROM things WHERE id = $1;

-- second_query --
-- Count things.
-- not a header, just a comment inside the block
SELECT count(*)
FROM things;
"""


def test_blocks_are_split_by_name_in_order() -> None:
    blocks = parse_query_blocks(SAMPLE)
    assert list(blocks) == ["first_query", "second_query"]


def test_a_block_keeps_its_comments_and_sql_and_nothing_else() -> None:
    blocks = parse_query_blocks(SAMPLE)
    assert blocks["first_query"] == (
        "-- Fetch one thing.\nSELECT * FROM things WHERE id = $1;"
    )
    assert blocks["second_query"] == (
        "-- Count things.\n"
        "-- not a header, just a comment inside the block\n"
        "SELECT count(*)\nFROM things;"
    )
    assert all("preamble" not in body for body in blocks.values())


def test_a_duplicate_name_is_refused() -> None:
    text = SAMPLE + "\n-- first_query --\n-- Again.\nSELECT 2;\n"
    with pytest.raises(ValueError, match="'first_query' is defined twice"):
        parse_query_blocks(text)


def test_text_without_headers_has_no_blocks() -> None:
    assert dict(parse_query_blocks("-- only a comment\nSELECT 1;\n")) == {}


def test_a_header_must_be_a_whole_line() -> None:
    text = "-- real --\nSELECT 1; -- fake --\n  -- indented --\nSELECT 2;\n"
    assert list(parse_query_blocks(text)) == ["real"]


def test_the_blocks_are_read_only() -> None:
    blocks = parse_query_blocks(SAMPLE)
    with pytest.raises(TypeError):
        blocks["first_query"] = "DROP TABLE things;"  # type: ignore[index]


# --- The packaged queries.sql -----------------------------------------------------------

REQUIRED = (
    "reserve",
    "start_attempt",
    "transition",
    "record_receipt",
    "claim_due",
    "list_effects",
    "verify_events",
)

_ANY_HEADER_LINE = re.compile(r"^-- \S+ --$", re.MULTILINE)
_STRING_LITERAL = re.compile(r"'(?:[^']|'')*'")
_LINE_COMMENT = re.compile(r"--[^\n]*")
_PARAMETER = re.compile(r"\$(\d+)")


def _code_only(body: str) -> str:
    """The SQL without comments and string literals, where placeholders would hide."""
    return _STRING_LITERAL.sub("''", _LINE_COMMENT.sub("", body))


def _packaged_text() -> str:
    return resources.files("effect_broker.store").joinpath("queries.sql").read_text()


def test_queries_loads_the_packaged_file_once() -> None:
    assert queries() is queries()
    assert dict(queries()) == dict(parse_query_blocks(_packaged_text()))


@pytest.mark.parametrize("name", REQUIRED)
def test_a_required_query_is_present_and_not_empty(name: str) -> None:
    body = queries()[name]
    assert _code_only(body).strip(), f"{name} has no SQL"


def test_every_header_line_in_the_file_became_a_block() -> None:
    # A header the parser does not recognise (a digit, a capital) would silently glue
    # its SQL onto the previous block; count what looks like a header against the parse.
    assert len(_ANY_HEADER_LINE.findall(_packaged_text())) == len(queries())


def _all_names() -> list[str]:
    return list(queries())


@pytest.mark.parametrize("name", _all_names())
def test_each_block_opens_with_a_one_line_description(name: str) -> None:
    lines = queries()[name].splitlines()
    assert len(lines) >= 2, f"{name} has no SQL after its description"
    assert re.fullmatch(r"-- \S.*\S", lines[0]), f"{name}: {lines[0]!r}"
    assert not lines[1].lstrip().startswith("--"), f"{name}: description is not one line"


@pytest.mark.parametrize("name", _all_names())
def test_each_block_uses_only_numbered_parameters(name: str) -> None:
    code = _code_only(queries()[name])
    assert "%s" not in code and "%(" not in code, f"{name} has a %-placeholder"
    assert "{" not in code and "}" not in code, f"{name} has a format placeholder"
    assert not re.search(r"(?<![:\w]):[A-Za-z_]\w*", code), f"{name} has a :name param"
    assert "?" not in code, f"{name} has a ? placeholder"
    used = {int(n) for n in _PARAMETER.findall(code)}
    # Postgres cannot type a parameter nobody mentions: numbers must run 1..n.
    assert used == set(range(1, len(used) + 1)), f"{name} uses ${sorted(used)}"


def test_the_placeholder_check_sees_through_literals_only() -> None:
    # The jsonb literal '{}' in claim_due is data, not a placeholder; a bare brace is.
    assert "{" not in _code_only("SELECT '{}'::jsonb, $1 -- {comment}")
    assert "{" in _code_only("SELECT * FROM t WHERE id = {effect_id}")


# --- load_migrations --------------------------------------------------------------------


def test_the_packaged_migrations_run_from_one_without_gaps() -> None:
    shipped = load_migrations()
    assert isinstance(shipped, tuple)
    assert shipped, "no migration shipped"
    assert [m.version for m in shipped] == list(range(1, len(shipped) + 1))
    assert shipped[0].label == "0001_initial"
    for migration in shipped:
        assert re.fullmatch(r"\d{4}_[a-z0-9_]+", migration.label)
        assert migration.sql.strip()
        assert migration.checksum == hashlib.sha256(migration.sql.encode()).hexdigest()


@dataclass(frozen=True)
class _FakeEntry:
    name: str
    text: str = "SELECT 1;"

    def read_text(self) -> str:
        return self.text


def _fake_package(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> None:
    folder = SimpleNamespace(iterdir=lambda: iter([_FakeEntry(n) for n in names]))
    package = SimpleNamespace(joinpath=lambda _: folder)
    monkeypatch.setattr(
        migrations_module, "resources", SimpleNamespace(files=lambda _: package)
    )


def test_load_migrations_sorts_and_ignores_other_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_package(
        monkeypatch, ["0002_b.sql", "__init__.py", "README.md", "0001_a.sql", "1_x.sql"]
    )
    assert [m.label for m in load_migrations()] == ["0001_a", "0002_b"]


def test_load_migrations_refuses_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_package(monkeypatch, ["0001_a.sql", "0003_c.sql"])
    with pytest.raises(MigrationError, match="migration 0002 is missing"):
        load_migrations()


# --- _pending ---------------------------------------------------------------------------

SHIPPED = (
    Migration(1, "initial", "CREATE TABLE a ();"),
    Migration(2, "more", "CREATE TABLE b ();"),
    Migration(3, "most", "CREATE TABLE c ();"),
)


def _recorded(*versions: int) -> dict[int, str]:
    return {m.version: m.checksum for m in SHIPPED if m.version in versions}


def test_a_fresh_database_needs_everything() -> None:
    assert _pending({}, SHIPPED) == list(SHIPPED)
    assert _pending({}, load_migrations()) == list(load_migrations())


def test_a_current_database_needs_nothing() -> None:
    assert _pending(_recorded(1, 2, 3), SHIPPED) == []


def test_only_the_unapplied_migrations_are_pending_in_order() -> None:
    assert _pending(_recorded(1), SHIPPED) == [SHIPPED[1], SHIPPED[2]]


def test_a_changed_checksum_is_refused() -> None:
    applied = _recorded(1, 2)
    applied[2] = hashlib.sha256(b"CREATE TABLE b (x int);").hexdigest()
    with pytest.raises(MigrationError, match="0002_more changed after it was applied"):
        _pending(applied, SHIPPED)


def test_a_database_newer_than_the_build_is_refused() -> None:
    applied = {**_recorded(1, 2, 3), 4: "x" * 64, 5: "y" * 64}
    with pytest.raises(MigrationError, match="has migration 0005, newer than this build"):
        _pending(applied, SHIPPED)
