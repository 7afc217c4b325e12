"""Speculative decoding that never changes a token: drafters and the verification rule.

A drafter proposes up to K next tokens for a decoding slot; the runner
verifies them in the same forward pass as every other row (1 + k rows for the
slot) and keeps the longest prefix where draft == sample plus the first
sample that differs (or the bonus token). Every row is sampled with its own
(seed, position) key and its logits do not depend on the rows beside it
(docs/speculative.md), so the kept tokens are exactly plain decoding's.
"""
