"""What ``up`` leaves in its data directory, as the commands beside it read it."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import SecretStr

from effect_broker.cli.local_state import RunningUp, admin_access, with_up_secrets
from effect_broker.config.settings import Settings
from tests.support import unused_pid


def test_a_running_up_is_found_and_a_dead_one_is_ignored(tmp_path: Path) -> None:
    RunningUp(os.getpid(), "http://127.0.0.1:1", "http://127.0.0.1:2").write(tmp_path)
    assert RunningUp.find(tmp_path) == RunningUp(
        os.getpid(), "http://127.0.0.1:1", "http://127.0.0.1:2"
    )

    RunningUp(unused_pid(), "http://127.0.0.1:1", "http://127.0.0.1:2").write(tmp_path)
    assert RunningUp.find(tmp_path) is None
    assert admin_access(None, None, tmp_path) == ("http://127.0.0.1:8081", None, [])


def test_flags_and_variables_win_over_ups_files(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text("from-file\n")
    (tmp_path / "admin.token").write_text("file-token\n")
    RunningUp(os.getpid(), "http://127.0.0.1:1", "http://127.0.0.1:2").write(tmp_path)

    given = Settings(data_dir=tmp_path, master_key=SecretStr("k"), admin_token=None)
    settings, used = with_up_secrets(given)

    assert settings.master_key == SecretStr("k")
    assert settings.admin_token == SecretStr("file-token")
    assert used == [tmp_path / "admin.token"]
    assert admin_access("http://x:1", "t", tmp_path) == ("http://x:1", "t", [])


def test_unset_secrets_come_from_ups_files(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text("from-file\n")

    settings, used = with_up_secrets(
        Settings(data_dir=tmp_path, master_key=None, master_keys=None, admin_token=None)
    )

    assert settings.master_key == SecretStr("from-file")
    assert settings.admin_token is None
    assert used == [tmp_path / "master.key"]
