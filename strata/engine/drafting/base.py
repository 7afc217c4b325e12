"""Drafter: what every draft source implements, and the per-slot bookkeeping they share.

`propose` gets the decoding requests allowed to draft this step, each with
the most tokens it may draft, and returns proposals. It runs in the engine's
worker thread (a draft model or an MTP head uses the device). A proposal may
be shorter than allowed or empty; it only changes speed, never tokens. A
drafter keeps per-slot state (an index, a KV cache, a hidden state); it
recognises a new request in a slot by identity, so admitting, cancelling or
reusing one slot never touches another's state.
"""

from __future__ import annotations


class Drafter:
    source = "none"          # the label in /metrics

    def propose(self, wants: list[tuple[object, int]]) -> dict[object, list[int]]:
        """wants: (request, most tokens it may draft >= 1), in slot order -> {request: drafts}."""
        raise NotImplementedError

    def admit(self, request) -> None:
        """A request was given a slot (its prompt positions are known)."""

    def release(self, slot: int) -> None:
        """The slot's request is gone; forget its state (the slot may be reused)."""

    def close(self) -> None:
        """Frees device memory the drafter owns."""


class SlotStates:
    """One state object per slot, rebuilt when a different request occupies the slot."""

    def __init__(self, make):
        self._make = make
        self._states: dict[int, tuple[object, object]] = {}

    def get(self, request):
        held = self._states.get(request.slot)
        if held is None or held[0] is not request:
            held = (request, self._make(request))
            self._states[request.slot] = held
        return held[1]

    def drop(self, slot: int) -> None:
        self._states.pop(slot, None)

    def items(self):
        return [(slot, state) for slot, (_, state) in self._states.items()]
