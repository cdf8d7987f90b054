"""A uint8 frame cache for camera features, each episode decoded once (on first use) for all DataLoader workers:
"ram", an anonymous shared memory map (forked workers see its writes), or "disk", a memory-mapped file under
`$HF_HOME/hfpolicy/frame_cache/` (spawned workers reopen it by path; removed when the cache is collected)."""

import bisect
import mmap
import os
import uuid
import weakref
from pathlib import Path

import av
import numpy as np
import torch
from av.video.reformatter import VideoReformatter
from huggingface_hub import constants

from hfpolicy.datasets.format import DatasetFormatError, TimestampError
from hfpolicy.io.video import NoVideoStreamError, VideoFile, decode_frames, frame_into_chw, rgb_threads, video_name

FRAME_CACHE_RAM_CAP_GB = 8.0  # default cap: a bigger cache goes to a memory-mapped file instead of RAM
_HEADER_BYTES = 64  # the per-episode "decoded" flags are padded to this alignment before the frames


def frame_cache_dir() -> Path:
    return Path(constants.HF_HOME) / "hfpolicy" / "frame_cache"


def _remove_file(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        Path(path).unlink(missing_ok=True)


class FrameCache:
    """uint8 frames (num_frames, C, H, W) plus one "decoded" flag per episode, in shared memory or a shared file."""

    def __init__(self, num_frames: int, chw: tuple[int, int, int], num_episodes: int, storage: str):
        self.num_frames, self.chw, self.num_episodes, self.storage = num_frames, tuple(chw), num_episodes, storage
        self._flag_bytes = -(-max(num_episodes, 1) // _HEADER_BYTES) * _HEADER_BYTES
        self.nbytes = self._flag_bytes + num_frames * int(np.prod(chw))
        self.path: str | None = None
        if storage == "disk":
            directory = frame_cache_dir()
            directory.mkdir(parents=True, exist_ok=True)
            self.path = str(directory / f"{uuid.uuid4().hex}.u8")
            with open(self.path, "wb") as f:
                f.truncate(self.nbytes)  # sparse: no disk used until episodes are decoded
            weakref.finalize(self, _remove_file, self.path, os.getpid())
        self._open()

    def _open(self) -> None:
        raw: np.ndarray
        self._buffer: mmap.mmap | np.memmap
        if self.path is not None:
            raw = self._buffer = np.memmap(self.path, dtype=np.uint8, mode="r+", shape=(self.nbytes,))
        else:
            self._buffer = mmap.mmap(-1, max(self.nbytes, 1))  # MAP_SHARED | MAP_ANONYMOUS: seen by forked workers
            raw = np.frombuffer(self._buffer, dtype=np.uint8, count=self.nbytes)
        self._flags = raw[: self.num_episodes]
        frames = raw[self._flag_bytes : self._flag_bytes + self.num_frames * int(np.prod(self.chw))]
        self.array = frames.reshape(self.num_frames, *self.chw)  # numpy view: single-threaded gathers
        self.frames = torch.from_numpy(self.array)  # the same memory as a tensor

    def is_filled(self, episode: int) -> bool:
        return bool(self._flags[episode])

    def mark_filled(self, episode: int) -> None:
        self._flags[episode] = 1

    @property
    def filled_episodes(self) -> int:
        return int(np.count_nonzero(self._flags))

    # Pickling (DataLoader workers started with spawn/forkserver): a file cache is reopened and stays shared; a RAM
    # cache cannot cross processes, so the worker starts an empty one of its own.
    def __getstate__(self) -> dict:
        return {
            k: getattr(self, k)
            for k in ("num_frames", "chw", "num_episodes", "storage", "path", "nbytes", "_flag_bytes")
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()


def decode_video_segment(
    path: str | Path | VideoFile, timestamps: np.ndarray, tolerance_s: float, out: np.ndarray, what: str
) -> None:
    """Decodes the frames at `timestamps` (times in the file, ascending) of `path` (or a binary file object) into
    `out` (len, C, H, W) uint8, from the keyframe before the first. TimestampError names the times with no frame
    within `tolerance_s`; DatasetFormatError a file that is not a decodable video."""
    timestamps = np.asarray(timestamps, dtype=np.float64)
    filled = np.zeros(len(timestamps), dtype=bool)
    _, height, width = out.shape[1:]
    reformatter = VideoReformatter()  # one for all frames: a new one per frame costs more than the decoding
    threads = rgb_threads(width, height)
    times = timestamps.tolist()  # floats: bisect finds a frame's row faster than np.searchsorted
    last = times[-1] + tolerance_s
    try:
        # the seek lands on the keyframe at or before the first frame's time + tolerance: an episode that starts
        # with a keyframe is decoded from it (from the first time - tolerance, the seek went back one keyframe more,
        # decoding the previous episode too: twice the frames for PushT's one-keyframe-per-episode videos)
        for t, frame in decode_frames(path, times[0] + tolerance_s, last):
            if t > last:
                break
            j = bisect.bisect_left(times, t - tolerance_s)
            if j >= len(times) or abs(times[j] - t) > tolerance_s:
                continue
            if (frame.height, frame.width) != (height, width):
                raise TimestampError(
                    f"{what}: the video {video_name(path)} has {frame.width}x{frame.height} frames but info.json declares "
                    f"{width}x{height}; fix the feature shape in meta/info.json"
                )
            frame_into_chw(frame, out[j], reformatter, threads)
            filled[j] = True
    except NoVideoStreamError as e:
        raise DatasetFormatError(
            f"{what}: {video_name(path)} holds no video stream: re-encode it, or download it again"
        ) from e
    except av.error.FFmpegError as e:  # garbage, or cut short (a broken download, a full disk while writing)
        raise DatasetFormatError(
            f"{what}: the video {video_name(path)} cannot be decoded ({type(e).__name__}: {e}): it is truncated or not an mp4; "
            "download it again (delete it from the cache) or re-encode it"
        ) from e
    if not filled.all():
        missing = timestamps[~filled]
        shown = ", ".join(f"{t:.4f}" for t in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise TimestampError(
            f"{what}: {len(missing)} of {len(timestamps)} frames are not in {video_name(path)} within {tolerance_s} s of the "
            f"expected video times ({shown} s). The episode's from_timestamp / the data timestamps do not match the "
            "video; re-encode the video, or fix meta/episodes, or raise tolerance_s if the times are only slightly off."
        )
