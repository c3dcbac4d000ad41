"""The master key checks of ``effect-broker doctor``, aware of what ``up`` leaves behind.

``up`` keeps its key in ``<data dir>/master.key`` and never exports it, so a doctor run
in another shell sees no ``EFFECT_BROKER_MASTER_KEY``. Like ``serve``, doctor then uses
that file (and says so). Advising a new key would be harmful: a ledger refuses any key
but the one that encrypted its payloads, and payloads stored under a lost key cannot be
read again. So these checks tell "wrong key for this ledger" apart, name the file that
holds the right one, and only suggest a new key while no ledger holds payloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effect_broker.crypto import Keyring, MasterKey
from effect_broker.errors import EffectBrokerError

VARIABLE = "EFFECT_BROKER_MASTER_KEY"
KEY_FILE = "master.key"
NEVER_NEW = "never a new one: payloads stored under a lost key cannot be read again"


@dataclass(frozen=True, slots=True)
class KeyFinding:
    """What the master key checks found; ``ok`` False is a failed check."""

    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class KeyFile:
    """The key ``up`` generated into its data directory, as a person should name it."""

    path: Path
    key: MasterKey | None

    @property
    def shown(self) -> str:
        return self.path.as_posix() if self.path.is_absolute() else f"./{self.path}"

    @property
    def export(self) -> str:
        return f"export {VARIABLE}=$(cat {self.path.as_posix()})"

    @classmethod
    def find(cls, data_dir: Path) -> KeyFile | None:
        path = data_dir / KEY_FILE
        if not path.is_file():
            return None
        try:
            key: MasterKey | None = MasterKey.from_base64(
                path.read_text(), source=str(path)
            )
        except (OSError, EffectBrokerError):
            key = None
        return cls(path, key)


def _without_advice(message: str) -> str:
    """A refusal from ``MasterKey.from_base64`` without its "create a new one" advice."""
    return message.split(" Create one with:", 1)[0].rstrip(". ")


def configured_key(
    value: str | None, key_file: KeyFile | None, ledger_keys: list[str] | None
) -> tuple[KeyFinding, Keyring | None]:
    """The "master key" check, and the keyring the ledger check should compare.

    With no key in the environment, the keyring is the one from ``up``'s file, so the
    ledger check can still say whether exporting that file would work.
    """
    holds_payloads = bool(ledger_keys)
    if value and value.strip():
        try:
            master = MasterKey.from_base64(value)
        except EffectBrokerError as exc:
            if not holds_payloads:
                return KeyFinding(False, exc.message), None
            assert ledger_keys is not None
            return KeyFinding(
                False,
                f"{_without_advice(exc.message)}. This ledger holds payloads under "
                f"master key {ledger_keys[0]}: set {VARIABLE} to that key, {NEVER_NEW}",
            ), None
        return KeyFinding(True, f"key id {master.key_id}"), Keyring(master)
    if key_file is not None:
        if key_file.key is None:
            detail = f"{VARIABLE} is not set and {key_file.shown} is not a valid key"
            return KeyFinding(False, detail), None
        detail = f"using {key_file.shown}: key id {key_file.key.key_id}"
        return KeyFinding(True, detail), Keyring(key_file.key)
    if holds_payloads:
        assert ledger_keys is not None
        return KeyFinding(
            False,
            f"{VARIABLE} is not set. This ledger holds payloads under master key "
            f"{ledger_keys[0]}: set {VARIABLE} to that key, {NEVER_NEW}",
        ), None
    try:
        MasterKey.from_base64(value)
    except EffectBrokerError as exc:  # the "not set, create one" advice: no payloads yet
        return KeyFinding(False, exc.message), None
    raise AssertionError("an empty key cannot decode")  # pragma: no cover


def ledger_key(
    keyring: Keyring | None, key_file: KeyFile | None, ledger_keys: list[str]
) -> KeyFinding:
    """Does the key we have match the one the ledger's payloads were encrypted under?"""
    in_file = key_file.key.key_id if key_file and key_file.key else None
    if not ledger_keys:
        first = keyring.key_id if keyring is not None else "its key"
        return KeyFinding(True, f"no payloads yet: the first proxy start records {first}")
    if keyring is None:
        return KeyFinding(False, f"no valid master key to compare with {ledger_keys[0]}")
    if any(key_id in ledger_keys for key_id in keyring.key_ids):
        if key_file is not None and in_file == keyring.key_id:
            return KeyFinding(True, f"the ledger was written with {key_file.shown}")
        return KeyFinding(True, "the ledger was written with this key")
    detail = (
        f"wrong key for this ledger: its payloads are under master key "
        f"{ledger_keys[0]}, {VARIABLE} is {keyring.key_id}. Set the key this ledger "
        f"was created with, {NEVER_NEW}"
    )
    if key_file is not None and in_file in ledger_keys:
        detail += f" (it is in {key_file.shown}: {key_file.export})"
    return KeyFinding(False, detail)
