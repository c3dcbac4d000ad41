from __future__ import annotations

import textwrap
from pathlib import Path

from typer.testing import CliRunner

from effect_broker.cli import _register, app

ROOT_ROUTES = Path(__file__).resolve().parents[2] / "routes.yaml"

_register()

runner = CliRunner()


def test_validate_prints_routes_and_contracts_tables() -> None:
    result = runner.invoke(app, ["routes", "validate", str(ROOT_ROUTES)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Routes" in out and "Contracts" in out
    for cell in (
        "payments",
        "(reverse)",
        "payments.internal",
        "/payments/v1/charges",
        "http://127.0.0.1:9000/idempotent",
        "payments.charge@1",
        "tickets.create@3",
        "email.send@1",
        "reconcilable",
        "Idempotency-Key",
        "X-Correlation-Id",
        "1d",
        "2s",
        "10s",
    ):
        assert cell in out, cell
    assert "valid (4 routes)" in out
    assert result.stderr == ""


def test_validate_reports_file_line_field_and_exits_1(tmp_path: Path) -> None:
    broken = tmp_path / "routes.yaml"
    broken.write_text(
        textwrap.dedent("""\
            version: 1
            contracts:
              - name: pay
                version: "1"
                safety: idempotent
                idempotency_header: Idempotency-Key
            routes:
              - name: charge
                match: {method: POST, host: pay.internal, path: /c}
                contract: missing
            """)
    )
    result = runner.invoke(app, ["routes", "validate", str(broken)])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert (
        f"{broken}:3: contracts[0].key_retention: idempotent contracts need" in lines[0]
    )
    assert lines[1].startswith(f"{broken}:10: routes[0].contract: no contract named")
    assert lines[2] == f"{broken}: 2 issues"
    assert "Routes" not in result.stdout


def test_validate_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["routes", "validate", str(missing)])
    assert result.exit_code == 1
    assert f"{missing}: (file): no such file" in result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


MCP_ROUTES = """\
version: 1
contracts:
  - name: billing.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
  - name: billing.refund
    version: "2"
    safety: idempotent
    idempotency_argument: idempotency_key
    key_retention: 1h
  - name: email.send
    version: "1"
    safety: unsafe
routes:
  - name: billing-mcp
    match: {path: /mcp}
    upstream: http://127.0.0.1:9100
    mcp:
      operation_key_argument: intent_key
      tools:
        create_charge: {contract: billing.charge}
        refund: {contract: billing.refund}
        send_receipt_email: {contract: email.send}
      read_only: [get_balance]
      unclassified: pass
"""


def table_rows(out: str) -> dict[str, list[str]]:
    """Each table row of rich's output by its first cell, cells stripped."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells:
            rows[cells[0]] = cells[1:]
    return rows


def test_validate_shows_each_mcp_tool_with_its_contract(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(MCP_ROUTES)
    result = runner.invoke(app, ["routes", "validate", str(routes)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "(mcp)@0" not in out and "unsafe" not in table_rows(out)["billing-mcp"]
    assert "MCP tools on billing-mcp (operation key argument: intent_key)" in out
    rows = table_rows(out)
    assert rows["create_charge"] == [
        "billing.charge@1",
        "idempotent",
        "Idempotency-Key",
        "recorded",
    ]
    assert rows["refund"][:3] == [
        "billing.refund@2",
        "idempotent",
        "argument idempotency_key",
    ]
    assert rows["send_receipt_email"][:3] == ["email.send@1", "unsafe", "-"]
    assert rows["get_balance"] == ["-", "read-only", "-", "passed through, unrecorded"]
    assert rows["(any other tool)"][-1] == (
        "passed through, unrecorded (unclassified: pass)"
    )
    assert rows["billing.refund"][2] == "argument idempotency_key"  # contracts table
    assert "valid (1 route)" in out


def test_validate_shows_a_transactional_contract_and_its_attempt_key(
    tmp_path: Path,
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        textwrap.dedent("""\
            version: 1
            contracts:
              - {name: ledger.post, version: "1", safety: transactional, timeout: 5s}
            routes:
              - name: ledger
                match: {method: POST, path: /ledger/v1/entries}
                upstream: http://127.0.0.1:9100
                contract: ledger.post
                inject_headers: {Effect-Broker-Secret: "${env:LEDGER_KIT_SECRET}"}
            """)
    )
    result = runner.invoke(app, ["routes", "validate", str(routes)])
    assert result.exit_code == 0, result.output
    for cell in ("transactional", "ledger.post@1", "Effect-Attempt-Key", "per attempt"):
        assert cell in result.stdout, cell
