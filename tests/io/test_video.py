"""hfpolicy.io.video's decoder: the open file kept for the next segment (same frames as a fresh open, reopened when
the file changes) and a forked process that replaces the container it inherited without freeing it (freeing joins
FFmpeg threads a fork did not copy)."""

import multiprocessing
import os

import numpy as np

from hfpolicy.io import video


def gradient_frames(n: int, shift: int = 0) -> list[np.ndarray]:
    ramp = np.arange(64, dtype=np.uint8)
    return [np.stack([np.add.outer(ramp, ramp) + 8 * (i + shift)] * 3, axis=-1).astype(np.uint8) for i in range(n)]


def test_the_open_file_is_reused_with_the_frames_of_a_fresh_open_and_reopened_when_it_changes(tmp_path):
    path = video.encode_video(gradient_frames(20), tmp_path / "a.mp4", fps=10)
    video.close_open_videos()
    fresh = video.read_video_frames(path, 1.0, 1.5)
    first = video._open_video.container
    again = video.read_video_frames(path, 1.0, 1.5)  # reuses the container: it seeks back
    start = video.read_video_frames(path, 0.0, 0.3)
    assert video._open_video.container is first and first is not None
    assert np.array_equal(fresh, again) and len(fresh) == 5 and len(start) == 3
    video.close_open_videos()
    assert np.array_equal(video.read_video_frames(path, 0.0, 0.3), start)

    replaced = video.encode_video(gradient_frames(20, shift=3), tmp_path / "b.mp4", fps=10)
    os.replace(replaced, path)  # same path, another file: opened anew
    assert not np.array_equal(video.read_video_frames(path, 1.0, 1.5), fresh)
    assert video._open_video.container is not first


def _decode_other(path: str, done) -> None:
    done.put(len(video.read_video_frames(path)))  # replaces the container inherited from the parent


def test_a_forked_process_replaces_the_inherited_open_file_without_freeing_it(tmp_path):
    a = video.encode_video(gradient_frames(30), tmp_path / "a.mp4", fps=10)
    b = video.encode_video(gradient_frames(12), tmp_path / "b.mp4", fps=10)
    video.read_video_frames(a, 0.5, 1.0)  # the parent keeps a.mp4 open
    context = multiprocessing.get_context("fork")
    done = context.Queue()
    child = context.Process(target=_decode_other, args=(str(b), done))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and done.get(timeout=5) == 12
    assert video._open_video.container is not None and len(video.read_video_frames(a, 0.5, 1.0)) == 5  # the parent's
