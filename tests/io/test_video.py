"""hfpolicy.io.video's decoder: the open file kept for the next segment (same frames as a fresh open, reopened when
the file changes), a forked process that replaces the container it inherited without freeing it (freeing joins
FFmpeg threads a fork did not copy), and frames split into channels with the pixels of swscale's rgb24."""

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


def test_frames_into_chw_have_the_pixels_of_the_rgb24_conversion(tmp_path):
    # noise (chroma that differs pixel to pixel) at sizes with and without row padding, and one decoded with threads
    rng = np.random.default_rng(0)
    for height, width in [(96, 96), (48, 70), (240, 320)]:
        frames = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(4)]
        path = video.encode_video(frames, tmp_path / f"noise_{width}x{height}.mp4", fps=10)
        reformatter, threads = video.VideoReformatter(), video.rgb_threads(width, height)
        decoded = 0
        for _, frame in video.decode_frames(path):
            out = np.empty((3, height, width), dtype=np.uint8)
            video.frame_into_chw(frame, out, reformatter, threads)
            rgb = frame.to_ndarray(format="rgb24")
            assert np.array_equal(out, rgb.transpose(2, 0, 1)), (width, height)
            strided = np.zeros((3, height, 2 * width), dtype=np.uint8)[:, :, ::2]  # not one block per channel
            video.frame_into_chw(frame, strided, reformatter, threads)
            assert np.array_equal(strided, out)
            decoded += 1
        assert decoded == 4
    video.close_open_videos()
