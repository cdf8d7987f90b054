"""Convert the diffusion_policy PushT zarr (pusht_cchi_v7_replay.zarr) into a LeRobot v3.0 dataset shaped like the
Hub's lerobot/pusht: fps 10, observation.image (video 96x96x3), observation.state, action, next.reward,
next.success, next.done (and optionally observation.environment_state, the T's 16 keypoint coordinates). Rewards are
recomputed with gym-pusht's geometry (docs/datasets.md#converting)."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets.writer import DatasetWriter
from hfpolicy.envs.pusht_scorer import PushTScorer
from hfpolicy.io.paths import check_apart

PUSHT_FPS = 10
PUSHT_TASK = "Push the T-shaped block onto the T-shaped target."
LAST_STEP_WARMUP_FRAMES = 10  # frames replayed before an episode's last action to recover the agent's velocity
ZARR_ARRAYS = ("data/img", "data/state", "data/action", "meta/episode_ends")
ZARR_METADATA_FILES = (".zgroup", ".zarray", ".zattrs", "zarr.json")  # JSON files zarr v2 / v3 keep per folder


def pusht_features(image_size: int = 96, environment_state: bool = False, images: bool = True) -> dict[str, dict]:
    """The features of a PushT dataset (lerobot/pusht's, optionally with the keypoints and without the camera)."""
    features: dict[str, dict] = {
        OBS_IMAGE: {"dtype": "video", "shape": [image_size, image_size, 3], "names": ["height", "width", "channels"]},
        OBS_STATE: {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        ACTION: {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        REWARD: {"dtype": "float32", "shape": [1], "names": None},
        SUCCESS: {"dtype": "bool", "shape": [1], "names": None},
        DONE: {"dtype": "bool", "shape": [1], "names": None},
    }
    if environment_state:
        names = [f"keypoint_{i}_{axis}" for i in range(8) for axis in ("x", "y")]
        features[OBS_ENV_STATE] = {"dtype": "float32", "shape": [16], "names": names}
    if not images:
        del features[OBS_IMAGE]
    return features


class ZarrStoreError(ValueError):
    """The zarr store is damaged or is not the diffusion_policy PushT layout (names the array and the chunk)."""


def check_zarr_metadata(zarr_path: Path) -> None:
    """ZarrStoreError naming the first metadata file of the converted arrays (or their groups) that is no JSON object."""
    folders = ["", "data", "meta", *ZARR_ARRAYS]
    for path in (zarr_path / folder / name for folder in folders for name in ZARR_METADATA_FILES):
        if not path.is_file():
            continue
        try:
            parsed = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            parsed = e
        if not isinstance(parsed, dict):
            raise ZarrStoreError(
                f"{path} is not a JSON object ({parsed}): the store's metadata is damaged (cut short?); copy or "
                "download the zarr again"
            )


def _read_chunk(array, index: int, name: str) -> np.ndarray:
    step = int(array.chunks[0])
    try:
        return np.asarray(array[index * step : (index + 1) * step])
    except Exception as e:  # noqa: BLE001 (codec errors come as many types)
        raise ZarrStoreError(f"{name} chunk {index} cannot be decoded ({type(e).__name__}: {e})") from e


def _read_array(group, name: str, zarr_path: Path) -> np.ndarray:
    """A whole zarr array, read chunk by chunk so that a chunk that fails to decode is named."""
    array = group[name]
    blocks = [_read_chunk(array, i, f"{zarr_path}/{name}") for i in range(-(-array.shape[0] // int(array.chunks[0])))]
    return np.concatenate(blocks) if blocks else np.asarray(array[:])


def _missing_chunks(array, folder: Path) -> list[int]:
    """Indices (along axis 0) of chunk files absent from a zarr v2 folder; [] when all are present (or unknown)."""
    if array.nchunks_initialized >= array.nchunks:
        return []
    meta = folder / ".zarray"
    separator = json.loads(meta.read_text()).get("dimension_separator") or "." if meta.is_file() else "."
    rest = separator.join("0" * (len(array.shape) - 1))
    n_chunks = -(-array.shape[0] // int(array.chunks[0]))
    names = [f"{i}{separator}{rest}" if rest else str(i) for i in range(n_chunks)]
    missing = [i for i, name in enumerate(names) if not (folder / name).is_file()]
    return missing or [-1]  # -1: zarr counts a chunk missing that this layout check cannot place


class _ZarrFrames:
    """Reads a chunked zarr image array slice by slice, decompressing each chunk once."""

    def __init__(self, array, name: str):
        self.array, self.name = array, name
        self.chunk = int(array.chunks[0])
        self._cache: dict[int, np.ndarray] = {}

    def __getitem__(self, bounds: tuple[int, int]) -> np.ndarray:
        start, end = bounds
        first, last = start // self.chunk, (end - 1) // self.chunk
        for index in list(self._cache):
            if index < first:
                del self._cache[index]
        blocks = []
        for index in range(first, last + 1):
            if index not in self._cache:
                block = _read_chunk(self.array, index, self.name)
                if not np.isfinite(block).all() or block.min() < 0 or block.max() > 255:
                    raise ZarrStoreError(
                        f"{self.name}: images must hold values in 0..255, chunk {index} has {block.min()}..{block.max()}"
                    )
                self._cache[index] = np.rint(block).astype(np.uint8)
            blocks.append(self._cache[index])
        joined = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        offset = first * self.chunk
        return joined[start - offset : end - offset]


def convert_pusht_zarr(
    zarr_path: str | Path,
    output_dir: str | Path,
    repo_id: str | None = None,
    episodes: Sequence[int] | None = None,
    *,
    environment_state: bool = False,
    overwrite: bool = False,
    video_crf: int = 23,
    progress: bool = True,
) -> Path:
    """Converts the diffusion_policy PushT zarr to a LeRobot v3.0 dataset at `output_dir` (new, unless `overwrite`);
    returns its path. `repo_id` names it in messages (default: local/<output_dir name>); `episodes` (default: all)
    are renumbered 0..n-1; `video_crf`: H.264 quality (lower is better and bigger)."""
    zarr_path, output_dir = Path(zarr_path), Path(output_dir)
    check_apart(
        output_dir,
        zarr_path,
        output_words=f"output_dir={output_dir}",
        source_words=f"the zarr {zarr_path}",
        replaces_output=overwrite,
    )
    group, states, actions, bounds = open_pusht_zarr(zarr_path, episodes)
    images = _ZarrFrames(group["data/img"], f"{zarr_path}/data/img")
    scorer = PushTScorer()
    features = pusht_features(int(group["data/img"].shape[1]), environment_state)
    writer = DatasetWriter.create(
        output_dir, repo_id or f"local/{output_dir.name}", PUSHT_FPS, features, overwrite=overwrite, video_crf=video_crf
    )
    with writer:
        bar = tqdm(bounds, desc="converting PushT episodes", unit="episode", disable=not progress)
        for start, end in bar:  # rewards recomputed from each frame's next state
            frames, state, action = images[start, end], states[start:end], actions[start:end]
            n = end - start
            coverage = np.empty(n)
            coverage[:-1] = scorer.coverage(state[1:, 2:5])
            warmup = max(0, n - 1 - LAST_STEP_WARMUP_FRAMES)
            coverage[-1] = scorer.coverage_after(state[warmup:], action[warmup:])  # where the last action leads
            reward, success = scorer.reward_success(coverage)
            agent = state[:, :2].astype(np.float32)
            keypoints = scorer.keypoints(state[:, 2:5]).astype(np.float32) if environment_state else None
            for i in range(n):
                frame = {
                    OBS_IMAGE: frames[i],
                    OBS_STATE: agent[i],
                    ACTION: action[i],
                    REWARD: np.float32(reward[i]),
                    SUCCESS: success[i],
                    DONE: i == n - 1,
                }
                if keypoints is not None:
                    frame[OBS_ENV_STATE] = keypoints[i]
                writer.add_frame(frame, task=PUSHT_TASK)
            writer.save_episode()
            bar.set_postfix(frames=writer.num_frames)
    return writer.root


def open_pusht_zarr(
    zarr_path: Path, episodes: Sequence[int] | None
) -> tuple[Any, np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """(the zarr group, states, actions, the [start, end) frames of each chosen episode), checked: no chunk file
    missing (zarr would read zeros), every chunk decodes, shapes agree, episode ends rise to the frame count, values
    are finite (else ZarrStoreError)."""
    import zarr

    if not zarr_path.is_dir():
        raise FileNotFoundError(f"{zarr_path} is not a zarr folder (expected the diffusion_policy PushT zarr)")
    check_zarr_metadata(zarr_path)
    try:
        group: Any = zarr.open_group(str(zarr_path), mode="r")
    except zarr.errors.GroupNotFoundError:
        raise ZarrStoreError(
            f"{zarr_path} holds no zarr group (no .zgroup or zarr.json): it is not the diffusion_policy PushT zarr"
        ) from None
    missing = [name for name in ZARR_ARRAYS if name not in group]
    if missing:
        raise ValueError(f"{zarr_path} lacks the arrays {missing}: it is not the diffusion_policy PushT zarr")
    shapes = {name: tuple(group[name].shape) for name in ZARR_ARRAYS}
    n = shapes["data/img"][0]
    expected = {"data/img": (n, None, None, 3), "data/state": (n, 5), "data/action": (n, 2)}
    for name, shape in expected.items():
        fits = len(shapes[name]) == len(shape)
        if not fits or any(e is not None and e != g for e, g in zip(shape, shapes[name], strict=True)):
            raise ZarrStoreError(f"{zarr_path}/{name} has shape {shapes[name]}, expected {shape} (N = {n} frames)")
    for name in ZARR_ARRAYS:
        lacking = _missing_chunks(group[name], zarr_path / name)
        if lacking:
            raise ZarrStoreError(
                f"{zarr_path}/{name} lacks chunk file(s) {lacking[:5]}{' ...' if len(lacking) > 5 else ''} (zarr would "
                "read them as zeros): the store is incomplete; copy or download it again"
            )
    ends = _read_array(group, "meta/episode_ends", zarr_path).astype(np.int64).reshape(-1)
    if len(ends) == 0 or ends[0] <= 0 or np.any(np.diff(ends) <= 0) or ends[-1] != n:
        raise ZarrStoreError(
            f"{zarr_path}/meta/episode_ends must rise strictly from > 0 to the frame count {n}; got {len(ends)} ends "
            f"from {ends[:1].tolist()} to {ends[-1:].tolist()}"
        )
    arrays = []
    for name, dtype in (("data/state", np.float64), ("data/action", np.float32)):
        values = _read_array(group, name, zarr_path).astype(dtype)
        bad_rows = np.flatnonzero(~np.isfinite(values).all(axis=1))
        if len(bad_rows):
            chunk = int(bad_rows[0]) // int(group[name].chunks[0])
            raise ZarrStoreError(
                f"{zarr_path}/{name} holds NaN or inf in {len(bad_rows)} rows (first: row {bad_rows[0]}, chunk "
                f"{chunk}): the store is damaged; nothing was converted"
            )
        arrays.append(values)
    starts = np.r_[0, ends[:-1]]
    chosen = list(range(len(ends))) if episodes is None else [int(e) for e in episodes]
    bad = [e for e in chosen if not 0 <= e < len(ends)]
    if bad or not chosen:
        raise ValueError(f"episodes {bad or chosen} are not in {zarr_path} (it has episodes 0..{len(ends) - 1})")
    return group, arrays[0], arrays[1], [(int(starts[e]), int(ends[e])) for e in chosen]
