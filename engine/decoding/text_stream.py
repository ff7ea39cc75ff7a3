"""The answer's text as it is committed: bytes -> text, UTF-8 safe across token boundaries,
holding back what could be the start of a stop string and cutting at the first one.

Linear in the answer's length: only the text not yet handed out is searched. That is enough,
because what could begin a stop string is never handed out, so no stop string can begin in
text already emitted; what is held back is shorter than the longest stop string.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str]) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in stop if s]
        self.held = ""  # decoded, not handed out: it may be the start of a stop string
        self._out: list[str] = []
        self.stopped = False

    @property
    def text(self) -> str:
        """All text handed out so far (after the final feed: the answer's)."""
        return "".join(self._out)

    def feed(self, data: bytes, final: bool = False) -> str:
        """The text these bytes add that can be shown now."""
        if self.stopped:
            return ""
        held = self.held + self.decoder.decode(data, final)
        found = [i for i in (held.find(s) for s in self.stop) if i != -1]
        if found:
            out, self.held, self.stopped = held[: min(found)], "", True
        elif final:
            out, self.held = held, ""
        else:
            keep = max((_start_at_end(held, s) for s in self.stop), default=0)
            out, self.held = held[: len(held) - keep], held[len(held) - keep :]
        self._out.append(out)
        return out


def _start_at_end(text: str, stop: str) -> int:
    """Length of the longest start of `stop` (shorter than all of it) that ends `text`."""
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0
