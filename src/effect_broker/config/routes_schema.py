"""routes.schema.json: the JSON Schema of routes.yaml, generated from the models.

Published so that an editor (via ``# yaml-language-server: $schema=...``) completes and
checks a routes file as it is typed. It is generated, never hand-edited, so it cannot
drift from what the loader accepts; a test fails when the committed copy is stale.
The generator is tuned to describe the file as it is written: durations as ``10s``, an
optional field without ``null`` (the loader refuses an explicit null), and header maps
as a pattern on names.
"""

from __future__ import annotations

import json
from datetime import timedelta

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from effect_broker.config.durations import format_duration
from effect_broker.config.routes_models import RoutesFile

SCHEMA_FILE = "routes.schema.json"
REGENERATE = f"effect-broker routes schema > {SCHEMA_FILE}"


class _RoutesSchema(GenerateJsonSchema):
    """Spells defaults and header maps the way a routes file writes them."""

    def encode_default(self, dft: object) -> object:
        if isinstance(dft, timedelta):
            return format_duration(dft)  # "10s", not ISO 8601 "PT10S"
        return super().encode_default(dft)

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        found = super().default_schema(schema)
        if found.get("default", ...) is None:  # absent, not null: null is refused
            del found["default"]
        return found

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])  # see Optional: null is refused

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        found = super().dict_schema(schema)
        patterns = found.pop("patternProperties", None)
        if isinstance(patterns, dict) and len(patterns) == 1:
            [(pattern, values)] = patterns.items()
            found["propertyNames"] = {"pattern": pattern}
            found["additionalProperties"] = values
        elif patterns is not None:
            found["patternProperties"] = patterns
        return found


def routes_json_schema() -> dict[str, object]:
    """The JSON Schema of routes.yaml, as committed in routes.schema.json."""
    schema = RoutesFile.model_json_schema(schema_generator=_RoutesSchema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render_routes_schema() -> str:
    """``routes_json_schema`` as the exact text of routes.schema.json."""
    return json.dumps(routes_json_schema(), indent=2, ensure_ascii=False) + "\n"
