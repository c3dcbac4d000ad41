"""The admin API's OpenAPI 3.1 document, generated from the models the handlers use.

Every schema comes from ``admin.schemas`` (answers) and ``admin.requests`` (what is
accepted) through pydantic's JSON Schema, so the document cannot describe a shape the
API does not send. What a model cannot know is kept in the small table below: which
operation answers which model with which status, and the problem+json errors each
operation can answer, with the ``type`` slugs a client branches on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from effect_broker.admin.operations import OPERATIONS, Operation, Reply
from effect_broker.admin.requests import RESOLVE_BODY, EffectPath, Query
from effect_broker.admin.schemas import Problem
from effect_broker.errors import PROBLEM_TYPE_BASE
from effect_broker.problems import PROBLEM_JSON

REF = "#/components/schemas/{model}"
RESOLUTION_REQUEST = "ResolutionRequest"


class _Generator(GenerateJsonSchema):
    """pydantic's generator, with constrained dict keys stated as ``propertyNames``.

    pydantic writes ``dict[Text, V]`` as ``patternProperties``, which only constrains
    values of matching keys and lets any other key through: the schema would then call
    valid a key the model refuses.
    """

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        generated = super().dict_schema(schema)
        patterns = generated.pop("patternProperties", None)
        if patterns:
            [(pattern, values)] = patterns.items()
            generated["propertyNames"] = {"pattern": pattern}
            generated["additionalProperties"] = values
        return generated


def _schemas() -> tuple[dict[str, Any], dict[type[BaseModel], Any]]:
    """Every component schema, and each model's own schema (for its parameters)."""
    models: set[type[BaseModel]] = {Problem, EffectPath}
    for operation in OPERATIONS:
        if operation.query is not None:
            models.add(operation.query)
        models.update(r.model for r in operation.responses.values() if r.model)
    inputs: list[tuple[Any, Any, TypeAdapter[Any]]] = [
        (model, "validation" if _is_input(model) else "serialization", TypeAdapter(model))
        for model in sorted(models, key=lambda m: m.__name__)
    ]
    inputs.append((RESOLUTION_REQUEST, "validation", RESOLVE_BODY))
    by_key, definitions = TypeAdapter.json_schemas(
        inputs, ref_template=REF, schema_generator=_Generator
    )
    components: dict[str, Any] = dict(definitions.get("$defs", {}))
    components[RESOLUTION_REQUEST] = by_key[(RESOLUTION_REQUEST, "validation")]
    inline = {
        key: components[schema["$ref"].rsplit("/", 1)[-1]]
        for (key, _), schema in by_key.items()
        if isinstance(key, type)
    }
    return components, inline


def _is_input(model: type[BaseModel]) -> bool:
    return issubclass(model, Query) or model is EffectPath


def _parameter_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """A model property as a parameter schema: a query value is never JSON null."""
    out = {k: v for k, v in schema.items() if k not in {"title", "description"}}
    nullable = False
    if "anyOf" in out:
        kept = [s for s in out.pop("anyOf") if s.get("type") != "null"]
        nullable = len(kept) < len(schema["anyOf"])
        [only] = kept
        out.update(only)
    if out.get("default") is None:
        out.pop("default", None)
    return out, nullable


def _parameters(
    model: type[BaseModel], where: str, schema: Mapping[str, Any]
) -> list[Any]:
    required = set(schema.get("required", ()))
    parameters = []
    for name, prop in schema["properties"].items():
        param_schema, _ = _parameter_schema(prop)
        parameter: dict[str, Any] = {
            "name": name,
            "in": where,
            "required": name in required or where == "path",
            "description": prop.get("description", ""),
            "schema": param_schema,
        }
        if param_schema.get("type") == "array":
            parameter |= {"style": "form", "explode": True}
        parameters.append(parameter)
    return parameters


def _reply(reply: Reply, inline: Mapping[type[BaseModel], Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": reply.description}
    if reply.model is not None:
        media = PROBLEM_JSON if reply.model is Problem else "application/json"
        ref = {"$ref": REF.format(model=reply.model.__name__)}
        answer["content"] = {media: {"schema": ref}}
    elif reply.media is not None:
        answer["content"] = {reply.media: {"schema": {"type": "string"}}}
    if reply.headers:
        answer["headers"] = {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in reply.headers.items()
        }
    if reply.links:
        answer["links"] = {
            target: {"operationId": target, "parameters": {"effect_id": expression}}
            for target, expression in reply.links.items()
        }
    return answer


@dataclass
class _Paths:
    inline: Mapping[type[BaseModel], Any]
    paths: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, operation: Operation) -> None:
        parameters: list[Any] = []
        if "{effect_id}" in operation.path:
            parameters += _parameters(EffectPath, "path", self.inline[EffectPath])
        if operation.query is not None:
            schema = self.inline[operation.query]
            parameters += _parameters(operation.query, "query", schema)
        item: dict[str, Any] = {
            "operationId": operation.operation_id,
            "summary": operation.summary,
            "security": [{"bearerAuth": []}] if operation.bearer else [],
            "responses": {
                str(status): _reply(reply, self.inline)
                for status, reply in sorted(operation.responses.items())
            },
        }
        if operation.description:
            item["description"] = operation.description
        if parameters:
            item["parameters"] = parameters
        if operation.body:
            item["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": REF.format(model=RESOLUTION_REQUEST)}
                    }
                },
            }
        self.paths.setdefault(operation.path, {})[operation.method] = item


@cache
def openapi_document() -> dict[str, Any]:
    """The document served at ``/openapi.json``; built once, it never changes at run."""
    components, inline = _schemas()
    paths = _Paths(inline)
    for operation in OPERATIONS:
        paths.add(operation)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "effect-broker admin API",
            "version": "1",
            "description": (
                "List, inspect, reconcile and resolve the effects effect-broker "
                "recorded. Every route under /v1 needs `Authorization: Bearer <token>`: "
                "in a sidecar the EFFECT_BROKER_ADMIN_TOKEN, which means the sidecar's "
                "tenant; in a gateway one of the tenant's API keys (ebk_...), which "
                "means that tenant. Errors are RFC 9457 problem+json with a stable "
                f"`type` under {PROBLEM_TYPE_BASE}. There is deliberately no 'retry "
                "anyway'."
            ),
        },
        "paths": paths.paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "Sidecar: EFFECT_BROKER_ADMIN_TOKEN (unset: every /v1 call is "
                        "401 `admin-token-not-configured`). Gateway: a tenant API key."
                    ),
                }
            },
            "schemas": components,
        },
    }
