"""The ledger's TCP endpoints from every DSN spelling libpq accepts."""

from __future__ import annotations

import pytest

from effect_broker.runtime import ledger_authorities
from effect_broker.store.dsn import conninfo_pairs, ledger_endpoints


@pytest.fixture(autouse=True)
def no_libpq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PGHOST", "PGPORT", "PGSERVICE", "PGSERVICEFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("dsn", "endpoints"),
    [
        ("postgresql://u:p@db:6543/x", [("db", 6543)]),
        ("postgres://u@127.0.0.1/x", [("127.0.0.1", 5432)]),
        ("postgresql://h1,h2:5433/x", [("h1", 5432), ("h2", 5433)]),
        ("postgresql://[::1]:5433/x", [("::1", 5433)]),
        # host and port as query parameters: the spelling the host part never saw
        ("postgresql://postgres@/db?host=127.0.0.1&port=5432", [("127.0.0.1", 5432)]),
        ("postgresql:///x?host=a,b&port=1,2", [("a", 1), ("b", 2)]),
        ("postgresql:///x?host=::1&port=5434", [("::1", 5434)]),
        ("postgresql:///x?host=%5B::1%5D&port=5434", [("::1", 5434)]),
        ("postgresql://h/x?hostaddr=10.0.0.5", [("h", 5432), ("10.0.0.5", 5432)]),
        # libpq's key=value form
        ("host=127.0.0.1 port=5432 dbname=x", [("127.0.0.1", 5432)]),
        ("host = 'db.internal' port=6000 user='o\\'b'", [("db.internal", 6000)]),
        ("host=::1", [("::1", 5432)]),
        (
            "host=a,b hostaddr=10.1.1.1 port=1,2",
            [("a", 1), ("b", 2), ("10.1.1.1", 1), ("10.1.1.1", 2)],
        ),
        # Unix sockets are not reachable over TCP
        ("postgresql:///x?host=/run/pg", []),
        ("postgresql://%2Frun%2Fpg/x", []),
        ("host=/run/pg port=5432", []),
        # asyncpg's own fallback without a host: its socket directories, then localhost
        ("postgresql:///x", [("localhost", 5432)]),
        (None, []),
        ("", []),
        ("mysql://db/x", []),
    ],
)
def test_ledger_endpoints(dsn: str | None, endpoints: list[tuple[str, int]]) -> None:
    assert ledger_endpoints(dsn) == endpoints


def test_the_environment_names_the_host_when_the_dsn_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGHOST", "db.internal")
    monkeypatch.setenv("PGPORT", "6000")

    assert ledger_endpoints("postgresql:///x") == [("db.internal", 6000)]
    assert ledger_endpoints("postgresql://other/x") == [("other", 6000)]


def test_conninfo_pairs_keeps_the_location_keywords_only() -> None:
    assert conninfo_pairs("user=x host='a b\\\\c' password=' s p ' port=1") == [
        ("host", "a b\\c"),
        ("port", "1"),
    ]
    with pytest.raises(ValueError):
        conninfo_pairs("host='unterminated")


def test_a_url_without_slashes_is_still_a_url() -> None:
    assert ledger_endpoints("postgresql:/x?host=127.0.0.1&port=5") == [("127.0.0.1", 5)]


async def test_a_ledger_name_is_refused_by_the_addresses_it_resolves_to() -> None:
    found = await ledger_authorities("postgresql://u@localhost:5999/x")

    assert found[0] == "localhost:5999"
    assert "127.0.0.1:5999" in found
    assert await ledger_authorities("postgresql:///x?host=/run/pg") == []
