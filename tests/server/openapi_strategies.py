"""Hypothesis strategies drawn from the server's own OpenAPI document (GET /openapi.json).

`request_bodies(schema)` draws JSON objects for an operation's request body: each declared field is left
out, drawn from its schema (types, enums, bounds, oneOf, nested objects and arrays), or replaced by an
arbitrary JSON value of any type, and sometimes an undeclared field is added. So most bodies are nearly
valid and reach deep into the server, and every field also sees every wrong type.
"""

from __future__ import annotations

from hypothesis import strategies as st

MAX_INT = 2**64

json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30))
any_json = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def from_schema(schema: dict, depth: int = 0) -> st.SearchStrategy:
    """Values that satisfy `schema` (the subset of JSON Schema that server/openapi_spec.py uses)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "oneOf" in schema:
        return st.one_of([from_schema(s, depth) for s in schema["oneOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, depth) for k in kind])
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low = schema.get("minimum", -MAX_INT)
        high = schema.get("maximum", MAX_INT)
        return st.integers(low, high)
    if kind == "number":
        return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False, allow_infinity=False,
                         exclude_min="exclusiveMinimum" in schema, exclude_max="exclusiveMaximum" in schema) \
            if "exclusiveMinimum" not in schema and "exclusiveMaximum" not in schema else \
            st.floats(schema.get("exclusiveMinimum", schema.get("minimum")),
                      schema.get("exclusiveMaximum", schema.get("maximum")), allow_nan=False,
                      allow_infinity=False, exclude_min="exclusiveMinimum" in schema,
                      exclude_max="exclusiveMaximum" in schema)
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=40)
    if kind == "array":
        items = from_schema(schema.get("items", {}), depth + 1) if depth < 4 else any_json
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 4), 4))
    if kind == "object":
        if "properties" in schema and depth < 4:
            return object_of(schema, depth + 1)
        return st.dictionaries(st.text(max_size=8), any_json, max_size=min(schema.get("maxProperties", 3), 3))
    return any_json


def object_of(schema: dict, depth: int = 0, wrong_types: bool = True) -> st.SearchStrategy:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))

    @st.composite
    def draw(draw_from):
        body = {}
        for name, field_schema in properties.items():
            choice = draw_from(st.sampled_from(["valid", "valid", "valid", "absent", "wrong"] if wrong_types
                                               else ["valid", "valid", "absent"]))
            if choice == "absent" and name not in required:
                continue
            body[name] = draw_from(any_json if choice == "wrong" else from_schema(field_schema, depth))
        if draw_from(st.integers(0, 9)) == 0:
            body[draw_from(st.text(min_size=1, max_size=12))] = draw_from(any_json)
        return body

    return draw()


def request_bodies(schema: dict) -> st.SearchStrategy:
    return object_of(schema)
