"""Incremental, UTF-8-safe detokenization with stop-string hold-back for streaming."""

from __future__ import annotations

from llm_engine.tokenizer import Tokenizer


class IncrementalDetokenizer:
    """Turns one token at a time into text deltas. A token that ends inside a multi-byte
    character (decodes to U+FFFD) is held until the character completes; text that could be
    the start of a stop string is held until it is known not to be one."""

    def __init__(self, tok: Tokenizer, stop: tuple[str, ...] = (), skip_special_tokens: bool = True,
                 include_stop: bool = False) -> None:
        self.tok = tok
        self.skip = skip_special_tokens
        self.stop = stop
        self.include_stop = include_stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""
        self.emitted = 0
        self.stopped = False

    def add(self, token_id: int) -> str:
        """Returns the new text that is safe to show (possibly "")."""
        self.ids.append(token_id)
        prefix = self.tok.decode(self.ids[self.prefix_offset : self.read_offset], self.skip)
        full = self.tok.decode(self.ids[self.prefix_offset :], self.skip)
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            start = len(self.text)
            self.text += full[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self._check_stop(start)
        return self._emit(final=self.stopped)

    def _check_stop(self, start: int) -> None:
        for s in self.stop:
            i = self.text.find(s, max(0, start - len(s) + 1))
            if i >= 0:
                self.text = self.text[: i + len(s) if self.include_stop else i]
                self.stopped = True
                return

    def _emit(self, final: bool) -> str:
        end = len(self.text) if final else max(self.emitted, len(self.text) - self.hold)
        delta = self.text[self.emitted : end]
        self.emitted = end
        return delta

    def finish(self) -> str:
        """Flush at the end of the request (a dangling partial character included)."""
        if not self.stopped and self.read_offset < len(self.ids):
            prefix = self.tok.decode(self.ids[self.prefix_offset : self.read_offset], self.skip)
            full = self.tok.decode(self.ids[self.prefix_offset :], self.skip)
            self.text += full[len(prefix) :]
            self.read_offset = len(self.ids)
        return self._emit(final=True)
