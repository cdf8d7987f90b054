"""Eval videos encoded in a background thread, so the rollout never waits for the encoder."""

import queue
import threading
from pathlib import Path

import numpy as np

from hfpolicy.io.video import Mp4Writer, VideoWriteError

_STOP = object()


class VideoRecorder:
    """Streams frames into mp4 files from a background thread (`add_frame` blocks while `max_queued_frames` wait);
    `close()` waits for the encoder and raises its error; unfinished videos are discarded."""

    def __init__(self, fps: float, max_queued_frames: int = 512):
        self.fps = fps
        self.paths: list[Path] = []  # finished videos, in the order they were finished
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued_frames)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._encode, name="hfpolicy-video-encoder", daemon=True)
        self._thread.start()

    def add_frame(self, path: str | Path, frame: np.ndarray) -> None:
        self._raise_if_failed()
        self._queue.put((Path(path), frame))

    def finish(self, path: str | Path) -> None:
        self._raise_if_failed()
        self._queue.put((Path(path), None))

    def close(self) -> list[Path]:
        """Waits until every queued frame is encoded; returns the finished videos' paths."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._raise_if_failed()
        return list(self.paths)

    def __enter__(self) -> "VideoRecorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif self._thread.is_alive():  # an error elsewhere: stop the encoder, keep that error
            self._queue.put(_STOP)
            self._thread.join()

    def _raise_if_failed(self) -> None:
        if isinstance(self._error, VideoWriteError):  # names the file and the fix: raised as it is
            raise VideoWriteError(str(self._error)) from self._error
        if self._error is not None:
            raise RuntimeError(f"the video encoder failed: {self._error!r}") from self._error

    def _encode(self) -> None:
        writers: dict[Path, Mp4Writer] = {}
        while (item := self._queue.get()) is not _STOP:
            if self._error is not None:
                continue  # keep draining so producers never block on a dead encoder
            path, frame = item
            try:
                if frame is None:
                    writer = writers.pop(path, None)
                    if writer is None:
                        raise ValueError(f"finish({path}) for a video that got no frames")
                    self.paths.append(writer.close())
                else:
                    if path not in writers:
                        writers[path] = Mp4Writer(path, self.fps)
                    writers[path].add_frame(frame)
            except BaseException as e:  # reported by the next add_frame / finish / close
                self._error = e
        for writer in writers.values():
            writer.abort()
