"""Progress bars that keep moving through long waits (tqdm draws only when the count moves): `ticking(bar)` redraws it
every TICK_S seconds; `LiveNote(bar)(text)` sets its postfix as often as wanted, drawn at most every `mininterval`."""

import contextlib
import threading
import time
from collections.abc import Iterator

from tqdm.auto import tqdm

TICK_S = 1.0  # seconds between the redraws of a ticking bar


@contextlib.contextmanager
def ticking(bar: tqdm, interval: float = TICK_S) -> Iterator[None]:
    """Redraws `bar` every `interval` seconds while the block runs (nothing for a disabled bar)."""
    if bar.disable:
        yield
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(interval):
            bar.refresh()  # under tqdm's own lock, as the owner's updates are

    thread = threading.Thread(target=tick, name="hfpolicy-ticker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class LiveNote:
    """Sets `bar`'s postfix on every call, drawn when `bar.mininterval` seconds passed since the last draw."""

    def __init__(self, bar: tqdm):
        self.bar = bar
        self.drawn_at = -float("inf")

    def __call__(self, text: str) -> None:
        if self.bar.disable:
            return
        self.bar.set_postfix_str(text, refresh=False)
        now = time.monotonic()
        if now - self.drawn_at >= self.bar.mininterval:
            self.drawn_at = now
            self.bar.refresh()
