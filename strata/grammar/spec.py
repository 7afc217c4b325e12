"""GrammarSpec: what a request asks its output to match, before compilation.

A spec is plain, hashable data (it lives inside the frozen SamplingParams),
so identical specs share one compiled grammar in the compiler's cache.
Kinds: json_schema (source: the schema as canonical JSON), json_object (any
JSON object), lark and gbnf (grammar text, both read by llguidance), regex,
and llguidance (a grammar already in llguidance's JSON form, as the tool
calling module builds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

KINDS = ("json_schema", "json_object", "lark", "gbnf", "regex", "llguidance")


@dataclass(frozen=True)
class GrammarSpec:
    kind: str
    source: str = ""
    param: str = field(default="response_format", compare=False)   # the request field errors name

    @classmethod
    def json_schema(cls, schema: dict | bool, param: str = "response_format") -> "GrammarSpec":
        return cls("json_schema", json.dumps(schema, sort_keys=True, separators=(",", ":")), param)

    @classmethod
    def json_object(cls) -> "GrammarSpec":
        return cls("json_object")

    def describe(self) -> str:
        return self.kind if not self.source else f"{self.kind} ({len(self.source)} characters)"
