"""The API's request and response shapes, declared once as data, for GET /openapi.json (server/openapi.py).

To document a new request field, add one entry to SHARED_FIELDS (both
generation endpoints), CHAT_FIELDS or COMPLETION_FIELDS: its JSON Schema,
with a description. The fuzz test (tests/server/test_openapi_fuzz.py) draws
requests from these schemas, so a field declared here is fuzzed too. The
schemas say what a well-formed request looks like; the server checks more
(ranges against the context, the model's vocabulary) and answers 400 for it.
"""

from __future__ import annotations

from strata.engine.sampling import MAX_TOP_LOGPROBS


def _s(schema_type, description: str, **more) -> dict:
    return {"type": schema_type, "description": description, **more}


TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "description": "token ids of the model"}
STOP = {"description": "up to 16 strings; generation stops before any of them",
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 16}]}

# Fields of both POST /v1/chat/completions and POST /v1/completions.
SHARED_FIELDS: dict[str, dict] = {
    "model": _s("string", "the served model's id (GET /v1/models); optional"),
    "max_tokens": _s("integer", "most tokens to generate; prompt + max_tokens must fit the context", minimum=1,
                     maximum=1 << 30),
    "temperature": _s("number", "0 is greedy", minimum=0, maximum=100),
    "top_p": _s("number", "nucleus sampling mass, in (0, 1]", exclusiveMinimum=0, maximum=1),
    "top_k": _s("integer", "0 (or -1) is off", minimum=-1, maximum=1 << 30),
    "min_p": _s("number", "in [0, 1)", minimum=0, exclusiveMaximum=1),
    "seed": _s("integer", "makes sampling repeatable; same seed, same tokens, whoever else is served",
               minimum=-(2**63), maximum=2**64 - 1),
    "stop": STOP,
    "stop_token_ids": {**TOKEN_IDS, "description": "generation stops after any of these ids"},
    "ignore_eos": _s("boolean", "keep generating past end-of-sequence tokens"),
    "n": _s("integer", "choices per request; choice i is sampled with key (seed, i) (docs/api.md)", minimum=1,
            maximum=128),
    "choice_index": _s("integer", "Strata extension: the first choice's index; with n = 1 it reproduces choice i "
                                  "of an n-choice request", minimum=0, maximum=1 << 20),
    "stream": _s("boolean", "answer as server-sent events"),
    "stream_options": {"type": "object", "description": "only with stream: true",
                       "properties": {"include_usage": _s("boolean", "a final chunk with usage")}},
    "return_token_ids": _s("boolean", "Strata extension: the generated token ids in the response"),
    "presence_penalty": _s("number", "subtracted once from the logit of every token generated so far",
                           minimum=-2, maximum=2),
    "frequency_penalty": _s("number", "subtracted per occurrence from the logit of generated tokens",
                            minimum=-2, maximum=2),
    "repetition_penalty": _s("number", "divides positive (multiplies negative) logits of prompt and generated "
                                       "tokens; 1 is off", exclusiveMinimum=0, maximum=2),
    "logit_bias": {"type": "object", "description": "token id (as a string) -> bias in [-100, 100] added to its "
                                                    "logit", "maxProperties": 300,
                   "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
    "min_tokens": _s("integer", "end-of-sequence and stop_token_ids are masked until this many tokens",
                     minimum=0),
    "response_format": {"type": "object", "description": "text, json_object, or json_schema {name, schema, strict}: "
                                                         "the answer validates against the schema",
                        "properties": {"type": {"enum": ["text", "json_object", "json_schema"]},
                                       "json_schema": {"type": "object", "properties": {
                                           "name": {"type": "string"}, "schema": {"type": "object"},
                                           "strict": {"type": "boolean"}}}}},
    "grammar": _s("string", "Strata extension: a GBNF or Lark grammar the answer must match (llguidance)"),
    "cache_prompt": _s("boolean", "map the longest cached prefix of the prompt and leave this request's pages "
                       "in the prefix cache (default true; the tokens are the same either way)"),
    "speculative": _s("boolean", "Strata extension: false never drafts for this request (with --draft); "
                                 "the tokens are the same either way"),
    "user": _s("string", "an end-user id; accepted and ignored"),
}

IMAGE_URL_PART = {
    "type": "object", "required": ["type", "image_url"],
    "properties": {
        "type": {"enum": ["image_url"]},
        "image_url": {"type": "object", "required": ["url"], "properties": {
            "url": _s("string", "data:image/...;base64,..., a file in the media directory, or (if allowed) a "
                                "public http(s) URL"),
            "detail": {"enum": ["auto", "low", "high"]}}},
    },
}
TEXT_PART = {"type": "object", "required": ["type", "text"],
             "properties": {"type": {"enum": ["text"]}, "text": {"type": "string"}}}
MESSAGE = {
    "type": "object", "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"oneOf": [{"type": "string"},
                              {"type": "array", "items": {"oneOf": [TEXT_PART, IMAGE_URL_PART]}}],
                    "description": "required but for assistant messages; image parts need a vision model"},
        "name": {"type": "string"},
        "tool_call_id": {"type": "string", "description": "tool messages: the call this result answers"},
        "tool_calls": {"type": "array", "description": "assistant messages: the calls it made", "items": {
            "type": "object", "required": ["function"], "properties": {
                "id": {"type": "string"}, "type": {"enum": ["function"]},
                "function": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"}, "arguments": {"type": "string"}}}}}},
    },
}

CHAT_FIELDS: dict[str, dict] = {
    "messages": {"type": "array", "items": MESSAGE, "minItems": 1, "description": "the conversation"},
    "max_completion_tokens": _s("integer", "max_tokens by its newer name", minimum=1),
    "logprobs": _s("boolean", "log-probabilities of the generated tokens"),
    "top_logprobs": _s("integer", "alternatives per token (needs logprobs)", minimum=0, maximum=MAX_TOP_LOGPROBS),
    "tools": {"type": "array", "maxItems": 128, "description": "functions the model may call",
              "items": {"type": "object", "required": ["type", "function"], "properties": {
                  "type": {"enum": ["function"]},
                  "function": {"type": "object", "required": ["name"], "properties": {
                      "name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
                      "parameters": {"type": "object"}}}}}},
    "tool_choice": {"description": "auto, none, required, or {type: function, function: {name}}",
                    "oneOf": [{"enum": ["auto", "none", "required"]},
                              {"type": "object", "required": ["type", "function"], "properties": {
                                  "type": {"enum": ["function"]},
                                  "function": {"type": "object", "required": ["name"],
                                               "properties": {"name": {"type": "string"}}}}}]},
    "parallel_tool_calls": _s("boolean", "with tool_choice required: up to one call per tool (default true)"),
    "chat_template_kwargs": {"type": "object", "description": "extra variables for the chat template"},
}

COMPLETION_FIELDS: dict[str, dict] = {
    "prompt": {"description": "text, or token ids", "oneOf": [{"type": "string", "minLength": 1},
                                                              {**TOKEN_IDS, "minItems": 1}]},
    "logprobs": _s("integer", "log-probabilities with this many alternatives", minimum=0,
                   maximum=MAX_TOP_LOGPROBS),
    "echo": _s("boolean", "not supported: only false"),
    "suffix": _s("string", "not supported: only empty"),
    "best_of": _s("integer", "only 1", minimum=1, maximum=1),
}

TOKENIZE_FIELDS: dict[str, dict] = {
    "model": SHARED_FIELDS["model"],
    "prompt": _s("string", "text to tokenize (or send messages)"),
    "messages": {**CHAT_FIELDS["messages"], "description": "a conversation, tokenized as a chat prompt"},
    "add_special_tokens": _s("boolean", "add BOS/EOS as the model asks (prompt only; default true)"),
}
DETOKENIZE_FIELDS: dict[str, dict] = {"model": SHARED_FIELDS["model"], "tokens": TOKEN_IDS}

ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "param", "code"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
USAGE = {"type": "object", "properties": {"prompt_tokens": {"type": "integer"},
                                          "completion_tokens": {"type": "integer"},
                                          "total_tokens": {"type": "integer"},
                                          "prompt_tokens_details": {"type": "object", "properties": {
                                              "cached_tokens": {"type": "integer"}}}}}
COMPLETION_RESPONSE = {
    "type": "object", "required": ["id", "object", "created", "model", "choices"],
    "properties": {"id": {"type": "string"}, "object": {"type": "string"}, "created": {"type": "integer"},
                   "model": {"type": "string"}, "choices": {"type": "array", "items": {"type": "object"}},
                   "usage": USAGE},
}
MODEL_CARD = {"type": "object", "required": ["id", "object"],
              "properties": {"id": {"type": "string"}, "object": {"enum": ["model"]},
                             "created": {"type": "integer"}, "owned_by": {"type": "string"},
                             "max_model_len": {"type": "integer"}}}

# (method, path, summary, request body fields or None, required fields, 200 response schema, needs the API key)
OPERATIONS = [
    ("post", "/v1/chat/completions", "Chat completion (or a stream of chunks with stream: true)",
     SHARED_FIELDS | CHAT_FIELDS, ["messages"], COMPLETION_RESPONSE, True),
    ("post", "/v1/completions", "Text completion of a prompt (or a stream of chunks)",
     SHARED_FIELDS | COMPLETION_FIELDS, ["prompt"], COMPLETION_RESPONSE, True),
    ("get", "/v1/models", "The served model", None, [],
     {"type": "object", "properties": {"object": {"enum": ["list"]}, "data": {"type": "array", "items": MODEL_CARD}}},
     True),
    ("get", "/v1/models/{model}", "One model by id", None, [], MODEL_CARD, True),
    ("post", "/tokenize", "Token ids of a prompt or a chat", TOKENIZE_FIELDS, [],
     {"type": "object", "properties": {"tokens": TOKEN_IDS, "count": {"type": "integer"},
                                       "max_model_len": {"type": "integer"}}}, True),
    ("post", "/detokenize", "Text of token ids", DETOKENIZE_FIELDS, ["tokens"],
     {"type": "object", "properties": {"prompt": {"type": "string"}}}, True),
    ("get", "/health", "Liveness: 200 while serving, 503 while stopping (no API key)", None, [],
     {"type": "object", "properties": {"status": {"type": "string"}, "model": {"type": "string"}}}, False),
    ("get", "/metrics", "Prometheus text", None, [], {"type": "string"}, True),
    ("get", "/slots", "What each slot is doing", None, [], {"type": "object"}, True),
    ("post", "/slots/{id_slot}", "Save the slot's cached prefix to a file under --slot-save-path, or restore one "
     "into the prefix cache (query: action=save|restore, filename)", None, [],
     {"type": "object", "properties": {"id_slot": {"type": "integer"}, "filename": {"type": "string"},
                                       "n_saved": {"type": "integer"}, "n_written": {"type": "integer"},
                                       "n_restored": {"type": "integer"}, "n_read": {"type": "integer"}}}, True),
    ("get", "/openapi.json", "This document", None, [], {"type": "object"}, True),
]
