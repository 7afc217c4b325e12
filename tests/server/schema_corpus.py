"""JSON schemas that tests/server/test_schema_corpus.py and bench/grammar_engines.py run:
nested objects, enums, arrays with bounds, required and optional fields,
numbers, booleans, nullable values and $defs references, each with one valid
instance (for the benchmark's token walk). Strings and numbers carry bounds:
a 135M model left free inside a string can ramble past max_tokens."""

CORPUS = {
    "flat": ({"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False},
             {"name": "Ada", "age": 36}),
    "enum": ({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                               "size": {"type": "string", "enum": ["S", "M", "L"]}},
              "required": ["color", "size"], "additionalProperties": False},
             {"color": "green", "size": "M"}),
    "nested": ({"type": "object", "properties": {
                    "user": {"type": "object", "properties": {
                        "id": {"type": "integer", "minimum": 0, "maximum": 99999},
                        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                                                      "zip": {"type": "string", "maxLength": 16}},
                                    "required": ["city"], "additionalProperties": False}},
                             "required": ["id", "address"], "additionalProperties": False}},
                "required": ["user"], "additionalProperties": False},
               {"user": {"id": 7, "address": {"city": "Paris", "zip": "75001"}}}),
    "array": ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 16},
                                                         "minItems": 1, "maxItems": 4}},
               "required": ["tags"], "additionalProperties": False},
              {"tags": ["a", "b"]}),
    "numbers": ({"type": "object", "properties": {"x": {"type": "number", "minimum": -1000, "maximum": 1000}, "ok": {"type": "boolean"},
                                                  "note": {"type": ["string", "null"], "maxLength": 16}},
                 "required": ["x", "ok", "note"], "additionalProperties": False},
                {"x": 1.5, "ok": True, "note": None}),
    "array_of_objects": ({"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
                              "type": "object", "properties": {"sku": {"type": "string", "maxLength": 16},
                                                               "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                              "required": ["sku", "qty"], "additionalProperties": False}}},
                          "required": ["items"], "additionalProperties": False},
                         {"items": [{"sku": "x1", "qty": 2}]}),
    "defs": ({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "maximum": 999}, "y": {"type": "integer", "maximum": 999}},
                                  "required": ["x", "y"], "additionalProperties": False}},
              "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
              "required": ["a", "b"], "additionalProperties": False},
             {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 4}}),
    "optional": ({"type": "object", "properties": {"title": {"type": "string", "maxLength": 20},
                                                   "year": {"type": "integer", "minimum": 1000, "maximum": 2100}},
                  "required": ["title"], "additionalProperties": False},
                 {"title": "Dune"}),
}
