"""Structured output: grammars (JSON schema, any JSON object, Lark, GBNF, regex)
compiled with llguidance into per-request token masks. See docs/structured_output.md."""
