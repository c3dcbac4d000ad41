"""The target kit's pure parts: what imports without a driver or framework, and the
endpoint rules decided before any database is asked."""

from __future__ import annotations

import json

import pytest

from effect_broker.target import (
    MalformedAttemptKey,
    StoredAnswer,
    TombstoneResult,
    read_attempt_key,
)
from effect_broker.target.endpoints import Endpoints, owns
from effect_broker.target.protocol import (
    AttemptReport,
    AttemptState,
    attempt_key,
    lookup_path,
    tombstone_path,
)
from effect_broker.target.schema import migrations

KEY = attempt_key("downstream", 1)


class Recorder:
    """A backend that fails the test if the endpoints ever reach the database."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def lookup(self, attempt_key: str) -> AttemptReport:
        self.calls.append(f"lookup {attempt_key}")
        return AttemptReport(attempt_key, AttemptState.ABSENT)

    async def tombstone(self, attempt_key: str) -> TombstoneResult:
        self.calls.append(f"tombstone {attempt_key}")
        report = AttemptReport(attempt_key, AttemptState.TOMBSTONED, "now")
        return TombstoneResult(report, created=True)

    async def check_installed(self) -> None:
        self.calls.append("check")


@pytest.mark.parametrize(
    ("method", "path", "secret", "status"),
    [
        ("PUT", tombstone_path(KEY), None, 401),
        ("PUT", tombstone_path(KEY), "wrong", 401),
        ("PUT", tombstone_path("bad key!"), None, 401),  # the secret comes first
        ("PUT", tombstone_path("bad key!"), "s", 400),
        ("GET", lookup_path("a" * 15), "s", 400),
        ("POST", tombstone_path(KEY), "s", 405),
        ("GET", lookup_path(KEY) + "/x/tombstone", "s", 404),
        ("GET", lookup_path(""), "s", 404),
    ],
)
async def test_refused_requests_never_reach_the_database(
    method: str, path: str, secret: str | None, status: int
) -> None:
    backend = Recorder()
    reply = await Endpoints(backend, "s").handle(method, path, secret)
    assert reply.status == status
    assert json.loads(reply.body)["status"] == status
    assert backend.calls == []


async def test_accepted_requests_reach_the_backend_once() -> None:
    backend = Recorder()
    endpoints = Endpoints(backend, "s")
    lookup = await endpoints.handle("GET", lookup_path(KEY), "s")
    tombstone = await endpoints.handle("PUT", tombstone_path(KEY), "s")
    assert (lookup.status, tombstone.status) == (404, 201)
    assert backend.calls == [f"lookup {KEY}", f"tombstone {KEY}"]


def test_the_kit_owns_only_its_prefix() -> None:
    assert owns(lookup_path(KEY))
    assert not owns("/.well-known/other")
    assert not owns("/v1/charges")


def test_read_attempt_key() -> None:
    assert read_attempt_key({"Effect-Attempt-Key": KEY}) == KEY
    assert read_attempt_key({}) is None
    with pytest.raises(MalformedAttemptKey):
        read_attempt_key({"Effect-Attempt-Key": "not a key"})


def test_migrations_are_numbered_and_create_the_table() -> None:
    found = migrations()
    assert [name for name, _ in found] == ["0001_attempts.sql"]
    assert "CREATE TABLE IF NOT EXISTS effect_broker_attempts" in found[0][1]


def test_stored_answers_survive_the_protocol_document() -> None:
    answer = StoredAnswer(201, {"Content-Type": "application/json"}, b"\x00\xff{}")
    report = AttemptReport(KEY, AttemptState.COMMITTED, "t", answer)
    assert AttemptReport.from_json(report.to_json(), expected_key=KEY) == report
