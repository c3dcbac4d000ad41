"""Versioned contracts for well-known APIs, which a route names instead of writing one.

``contract: stripe@1`` in a route stands for the contract below: what the API's own
documentation promises, spelled as a routes-file contract section. A preset never
changes once published; a changed promise is a new version (``stripe@2``), so effects
pinned to ``stripe@1`` keep meaning what they meant. Expansion happens on the parsed
file before validation, so a preset is checked exactly as a hand-written contract is.

Each preset also carries a sample request a sandbox of the API accepts, which
``contracts verify`` sends when it is not given one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from effect_broker.config.yaml_lines import YamlDocument, field_label
from effect_broker.errors import ConfigIssue

PRESET_SEPARATOR = "@"


@dataclass(frozen=True, slots=True)
class Sample:
    """A request the API's sandbox accepts, and the same key's drifted payload."""

    path: str
    body: str
    drift_body: str
    content_type: str
    effect_id: str = "/id"  # JSON pointer to the created object's id


@dataclass(frozen=True, slots=True)
class Preset:
    ref: str
    section: Mapping[str, Any]  # a contract section, as it would be written in the file
    sample: Sample
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return str(self.section["name"])


STRIPE_1 = Preset(
    ref="stripe@1",
    section=MappingProxyType(
        {
            "name": "stripe",
            "version": "1",
            "safety": "idempotent",
            # Stripe replays the first answer for a key it has seen, and answers 400
            # idempotency_error for the same key with other parameters.
            "idempotency_header": "Idempotency-Key",
            # Stripe keeps keys for at least 24 hours.
            "key_retention": "24h",
            "timeout": "30s",
        }
    ),
    sample=Sample(
        # A PaymentIntent that is never confirmed: an object in test mode, no money.
        path="/v1/payment_intents",
        body="amount=100&currency=usd&payment_method_types[]=card",
        drift_body="amount=101&currency=usd&payment_method_types[]=card",
        content_type="application/x-www-form-urlencoded",
    ),
    notes=("errors come in Stripe's envelope: {'error': {'type', 'code', 'message'}}",),
)

PRESETS: Mapping[str, Preset] = MappingProxyType({STRIPE_1.ref: STRIPE_1})


def is_preset_ref(name: object) -> bool:
    return isinstance(name, str) and PRESET_SEPARATOR in name


def preset_for(ref: str) -> Preset | None:
    return PRESETS.get(ref)


def contract_section(preset: Preset) -> dict[str, Any]:
    """A fresh, mutable copy of the preset's section, to add to a parsed file."""
    return copy.deepcopy(dict(preset.section))


def expand_presets(document: YamlDocument) -> tuple[YamlDocument, list[ConfigIssue]]:
    """``document`` with each route's ``contract: NAME@VERSION`` made a contract of the
    file: the preset's section is added to ``contracts`` (once) and the route names it.
    An unknown preset is an issue at the route's ``contract`` line."""
    data = document.data
    routes = data.get("routes") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(routes, list):
        return document, []
    issues: list[ConfigIssue] = []
    data = dict(data)
    routes = list(routes)
    contracts = list(data.get("contracts") or [])
    added: set[str] = set()
    for index, route in enumerate(routes):
        if not isinstance(route, dict) or not is_preset_ref(route.get("contract")):
            continue
        ref = str(route["contract"])
        preset = preset_for(ref)
        if preset is None:
            path = ("routes", index, "contract")
            known = ", ".join(sorted(PRESETS))
            issues.append(
                ConfigIssue(
                    document.source,
                    document.line(path),
                    field_label(path),
                    f"no contract preset named {ref!r}; presets: {known} (or write the "
                    "contract in contracts and name it without @)",
                )
            )
            continue
        if ref not in added:
            contracts.append(contract_section(preset))
            added.add(ref)
        routes[index] = {**route, "contract": preset.name}
    if not added and not issues:
        return document, []
    data["routes"] = routes
    if added:
        data["contracts"] = contracts
    return replace(document, data=data), issues
