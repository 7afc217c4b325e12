"""SuffixIndex: a suffix automaton over one request's tokens, for prompt-lookup drafting.

Extended one token at a time (amortised O(1)), it answers: what is the
longest suffix of the tokens so far that also ends at an earlier position,
and where did it first end? The tokens that followed that earlier occurrence
are the draft. The automaton is the textbook one (states with transitions,
suffix links, the longest length, the first end position); the suffix link
of the state for the whole sequence is the longest suffix seen before.
"""

from __future__ import annotations


class SuffixIndex:
    def __init__(self):
        self.tokens: list[int] = []
        self._next: list[dict[int, int]] = [{}]
        self._link: list[int] = [-1]
        self._len: list[int] = [0]
        self._first_end: list[int] = [-1]     # index of the last token of the state's first occurrence
        self._last = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens) -> None:
        for token in tokens:
            self._add(int(token))

    def _new_state(self, length: int, first_end: int, transitions: dict, link: int) -> int:
        self._next.append(transitions)
        self._link.append(link)
        self._len.append(length)
        self._first_end.append(first_end)
        return len(self._len) - 1

    def _add(self, token: int) -> None:
        end = len(self.tokens)
        self.tokens.append(token)
        nxt, link, length = self._next, self._link, self._len
        cur = self._new_state(length[self._last] + 1, end, {}, -1)
        p = self._last
        while p != -1 and token not in nxt[p]:
            nxt[p][token] = cur
            p = link[p]
        if p == -1:
            link[cur] = 0
        else:
            q = nxt[p][token]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = self._new_state(length[p] + 1, self._first_end[q], dict(nxt[q]), link[q])
                while p != -1 and nxt[p].get(token) == q:
                    nxt[p][token] = clone
                    p = link[p]
                link[q] = clone
                link[cur] = clone
        self._last = cur

    def longest_repeat(self) -> tuple[int, int]:
        """(length, end index of its first occurrence) of the longest suffix that also ends earlier;
        (0, -1) when no token repeats."""
        state = self._link[self._last]
        if state <= 0:
            return 0, -1
        return self._len[state], self._first_end[state]

    def draft(self, max_tokens: int, min_match: int = 1) -> list[int]:
        """Up to max_tokens tokens that followed the earlier occurrence of the longest repeated
        suffix (at least min_match tokens long); [] when there is none."""
        length, end = self.longest_repeat()
        if length < max(min_match, 1) or max_tokens <= 0:
            return []
        return self.tokens[end + 1: end + 1 + max_tokens]
