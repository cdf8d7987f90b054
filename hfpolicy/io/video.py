"""MP4 video files with PyAV: encoding (H.264 yuv420p with `+faststart`, which browsers and the Hub play; even sizes
only), and the one decoder (`decode_frames`) with its probe."""

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Final, Protocol

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from hfpolicy.io.atomic import temporary_path

VIDEO_CODEC: Final = "libx264"  # the encoder; files are read back by FFmpeg's native "h264" decoder
VIDEO_PIX_FMT = "yuv420p"


class VideoWriteError(OSError):
    """An mp4 cannot be written where asked (an unwritable or missing folder, a full disk, an encoder failure)."""


def _write_error(path: Path, error: BaseException) -> VideoWriteError:
    return VideoWriteError(
        f"cannot write the video {path} ({type(error).__name__}: {error}): make {path.parent} writable, free disk "
        "space, or write the videos elsewhere"
    )


class Mp4Writer:
    """Streams HxWx3 uint8 RGB frames into an H.264 mp4 (frame i at i / fps), written atomically on `close()`."""

    def __init__(self, path: str | Path, fps: float, crf: int = 23, preset: str = "medium"):
        self.path = Path(path)
        self.fps = fps
        self.crf = crf
        self.preset = preset  # x264 speed/size trade-off: "fast" is ~2x faster than "medium" at small sizes
        self.n_frames = 0
        self._tmp_path = temporary_path(self.path, ".mp4")  # PyAV picks the container by the extension
        self._container: av.container.OutputContainer | None = None
        self._stream: av.VideoStream | None = None

    def _open(self, height: int, width: int) -> None:
        if height % 2 or width % 2:
            raise ValueError(
                f"{VIDEO_PIX_FMT} video needs even width and height, got {width}x{height}: crop or pad the frames"
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._container = av.open(str(self._tmp_path), mode="w", options={"movflags": "+faststart"})
        except (OSError, av.error.FFmpegError) as e:
            raise _write_error(self.path, e) from e
        rate = Fraction(self.fps).limit_denominator(1001)
        stream = self._container.add_stream(VIDEO_CODEC, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, VIDEO_PIX_FMT
        stream.time_base = 1 / rate
        stream.options = {"crf": str(self.crf), "preset": self.preset}
        self._stream = stream

    def add_frame(self, frame: np.ndarray) -> None:
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"frames must be HxWx3 uint8 RGB arrays, got shape {frame.shape} dtype {frame.dtype}")
        if self._container is None or self._stream is None:
            self._open(frame.shape[0], frame.shape[1])
        elif (frame.shape[0], frame.shape[1]) != (self._stream.height, self._stream.width):
            raise ValueError(
                f"frame {self.n_frames} is {frame.shape[1]}x{frame.shape[0]}, "
                f"earlier frames were {self._stream.width}x{self._stream.height}"
            )
        container, stream = self._container, self._stream
        assert container is not None and stream is not None  # opened above
        video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        video_frame.pts = self.n_frames
        try:
            container.mux(stream.encode(video_frame))
        except (OSError, av.error.FFmpegError) as e:  # a full disk, mostly
            raise _write_error(self.path, e) from e
        self.n_frames += 1

    def close(self) -> Path:
        if self._container is None or self._stream is None:
            raise ValueError(f"no frames were given for {self.path}: an mp4 needs at least one")
        try:
            self._container.mux(self._stream.encode(None))  # flush the encoder
            self._container.close()
            self._container = None
            os.replace(self._tmp_path, self.path)
        except (OSError, av.error.FFmpegError) as e:
            self.abort()
            raise _write_error(self.path, e) from e
        return self.path

    def abort(self) -> None:
        if self._container is not None:
            with contextlib.suppress(OSError, av.error.FFmpegError):
                self._container.close()
            self._container = None
        with contextlib.suppress(OSError):  # its folder may not exist (the error being cleaned up after)
            self._tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> "Mp4Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def encode_video(frames: Iterable[np.ndarray], path: str | Path, fps: float) -> Path:
    """Writes frames (HxWx3 uint8 RGB) to an H.264 mp4 at `path`, atomically."""
    with Mp4Writer(path, fps) as writer:
        for frame in frames:
            writer.add_frame(frame)
    return Path(path)


THREADED_DECODE_MIN_PIXELS = 320 * 240  # decode (and convert to RGB) with threads from this frame size up
AV_IO_BUFFER_BYTES = 32 * 1024  # PyAV's read buffer for a file object (its own default)


class VideoFile(Protocol):
    """A binary file object PyAV reads a video from (a remote file read by byte ranges)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


class NoVideoStreamError(ValueError):
    """The file opens, but holds no video stream."""


class UnreadableVideoError(ValueError):
    """The file is no video FFmpeg can open: cut short, garbage, or another kind of file."""


def video_name(path: str | Path | VideoFile) -> str:
    """How messages name a video: its path, or a file object's `name`."""
    return str(getattr(path, "name", path)) if hasattr(path, "read") else str(path)


def rgb_threads(width: int, height: int) -> int:
    """swscale threads for a frame's RGB conversion: 1 for small frames (threads cost more there), else 0 (auto)."""
    return 0 if width * height >= THREADED_DECODE_MIN_PIXELS else 1


def frame_into_chw(frame, out: np.ndarray, reformatter: VideoReformatter, threads: int) -> None:
    """`frame` (an av.VideoFrame) as RGB into `out` (3, H, W) uint8, split by OpenCV (several times faster than numpy;
    docs/streaming.md#the-readers-small-costs)."""
    import cv2  # opencv-python, as gym-pusht requires it

    rgb = reformatter.reformat(frame, format="rgb24", threads=threads).to_ndarray()
    channels = list(out)
    if all(channel.flags.c_contiguous for channel in channels):  # what OpenCV writes into (else it refuses)
        written = cv2.split(rgb, channels)
        if all(a is b for a, b in zip(written, channels, strict=True)):
            return
    out[...] = rgb.transpose(2, 0, 1)


class _OpenVideo(threading.local):
    """The last video file this thread decoded from a path, still open (a thread's own: a container is not shared)."""

    key: tuple | None = None
    container: av.container.InputContainer | None = None
    pid: int = -1


_open_video = _OpenVideo()
_INHERITED_CONTAINERS: list = []  # containers a forked process got from its parent, kept (see _container)


@contextlib.contextmanager
def _container(source: str | VideoFile):
    """(an open container of `source`, whether it was just opened). A path's stays open for this thread's next read of
    the same file (same inode, size, mtime), if decoded without threads (docs/streaming.md#the-readers-small-costs)."""
    if not isinstance(source, str):
        with av.open(source, mode="r", buffer_size=AV_IO_BUFFER_BYTES) as read_once:
            yield read_once, True
        return
    cached = _open_video
    if cached.pid != os.getpid():  # a forked worker: the parent's container shares its file offset, leave it
        if cached.container is not None:
            _INHERITED_CONTAINERS.append(cached.container)
        cached.key, cached.container, cached.pid = None, None, os.getpid()
    info = os.stat(source)
    key = (source, info.st_ino, info.st_size, info.st_mtime_ns)
    fresh = cached.key != key
    if fresh:
        close_open_videos()
        cached.container = av.open(source, buffer_size=AV_IO_BUFFER_BYTES)
        cached.key = key
    container = cached.container
    assert container is not None  # opened above, or kept with its key
    try:
        yield container, fresh
    except GeneratorExit:  # a caller that stopped reading: the next one seeks anyway
        raise
    except BaseException:
        close_open_videos()  # a failed read may leave the demuxer anywhere
        raise
    finally:
        if cached.key is None and cached.container is container:  # forgotten (a threaded decoder): close it now
            close_open_videos()


def close_open_videos() -> None:
    """Closes the video file this thread keeps open."""
    cached = _open_video
    container, cached.key, cached.container = cached.container, None, None
    if container is not None and cached.pid == os.getpid():
        with contextlib.suppress(av.error.FFmpegError, OSError):
            container.close()


def decode_frames(path: str | Path | VideoFile, start_s: float = 0.0, end_s: float | None = None) -> Iterator[tuple]:
    """The one PyAV decoder: yields (time in s, av.VideoFrame) from the keyframe at or before `start_s` up to the first
    frame past `end_s` (included), seeking there; frame threads for large frames only. `path` may be a file object."""
    source = str(path) if isinstance(path, str | Path) else path
    with _container(source) as (container, fresh):
        if not container.streams.video:
            raise NoVideoStreamError(f"{video_name(path)} holds no video stream")
        stream = container.streams.video[0]
        large = stream.codec_context.width * stream.codec_context.height >= THREADED_DECODE_MIN_PIXELS
        if fresh:  # before the decoder opens
            if large:
                stream.thread_type = "AUTO"
                if isinstance(source, str):  # a decoder with threads is not kept open: closed as the `with` ends
                    _open_video.key = None
            else:
                stream.codec_context.thread_count = 1  # no FFmpeg threads: one kept open survives a fork
        time_base = Fraction(stream.time_base)
        if start_s > 0 or not fresh:  # a reused container is rewound, flushing its decoder
            target = int(Fraction(max(start_s, 0.0)).limit_denominator(10**9) / time_base)
            container.seek(target, stream=stream, backward=True, any_frame=False)
        # pts * num / den in Python ints: the correctly rounded float(pts * time_base), without a Fraction per frame
        # (those took a quarter of the decoding time of a 96x96 frame)
        num, den = time_base.numerator, time_base.denominator
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            t = frame.pts * num / den
            yield t, frame
            if end_s is not None and t > end_s:
                return


def read_video_frames(path: str | Path, start_s: float = 0.0, end_s: float | None = None) -> np.ndarray:
    """The frames in [start_s, end_s) (all by default; a quarter frame's tolerance) as (N, H, W, 3) uint8 RGB."""
    tolerance = 0.25 / probe_video(path).fps
    frames, reformatter = [], VideoReformatter()  # one for all frames (a new one per frame costs more)
    # seek to the keyframe at or before start_s + tolerance (before start_s - tolerance would be one keyframe early)
    for t, frame in decode_frames(path, start_s + tolerance, None if end_s is None else end_s - tolerance):
        if t < start_s - tolerance:
            continue
        if end_s is not None and t >= end_s - tolerance:
            break
        threads = rgb_threads(frame.width, frame.height)
        frames.append(reformatter.reformat(frame, format="rgb24", threads=threads).to_ndarray())
    if not frames:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    return np.stack(frames)


@dataclass(frozen=True)
class VideoProbe:
    """What a video file's first video stream says about itself."""

    fps: float
    width: int
    height: int
    codec: str
    pix_fmt: str | None
    has_audio: bool


def probe_video(path: str | Path, whole: bool = False) -> VideoProbe:
    """What the file's video stream says about itself; UnreadableVideoError when FFmpeg cannot open it, or (`whole`:
    its packets counted, none decoded) when it holds fewer frames than its index lists: cut short after an index at
    its front, it still opens."""
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as e:
        raise UnreadableVideoError(
            f"{path} is not a readable video ({e.strerror or type(e).__name__}): it is cut short or not an mp4; "
            "write it again, or remove it"
        ) from None
    with container:
        if not container.streams.video:
            raise NoVideoStreamError(f"{path} holds no video stream")
        stream = container.streams.video[0]
        context = stream.codec_context
        rate = stream.average_rate or stream.guessed_rate
        if rate is None:
            raise UnreadableVideoError(f"{path}'s video stream states no frame rate: write it again, or remove it")
        found = sum(1 for packet in container.demux(stream) if packet.size) if whole else stream.frames
        if found < stream.frames:
            raise UnreadableVideoError(
                f"{path} is not a readable video (cut short: {found} of the {stream.frames} frames its index lists "
                "are in the file): copy or download it again"
            )
        return VideoProbe(
            fps=float(rate),
            width=context.width,
            height=context.height,
            codec=context.name,
            pix_fmt=context.pix_fmt,
            has_audio=len(container.streams.audio) > 0,
        )
