"""Bad input gets an error that names the problem and the fix."""

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from hfpolicy.datasets import DatasetFormatError, PolicyDataset, TimestampError, UnsupportedVersionError


def test_a_folder_without_info_json(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(DatasetFormatError, match=r"has no meta/info\.json.*not a LeRobot dataset root.*root=None"):
        PolicyDataset("user/x", root=tmp_path)
    with pytest.raises(DatasetFormatError, match="does not exist"):
        PolicyDataset("user/x", root=tmp_path / "nowhere")


def test_a_dataset_one_folder_up_is_pointed_at(tiny_dataset):
    with pytest.raises(DatasetFormatError, match=f"its subfolder {tiny_dataset.root}"):
        PolicyDataset("user/x", root=tiny_dataset.root.parent)


def test_codebase_version_v20_says_how_to_convert(tmp_path, tiny_dataset):
    root = tmp_path / "old"
    shutil.copytree(tiny_dataset.root, root)
    info = json.loads((root / "meta/info.json").read_text())
    info["codebase_version"] = "v2.0"
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(UnsupportedVersionError) as error:
        PolicyDataset("user/old", root=root)
    message = str(error.value)
    assert "LeRobot v2.0 dataset" in message and "reads the v3.0 and v2.1 formats" in message
    assert "python -m lerobot.datasets.v21.convert_dataset_v20_to_v21 --repo-id=user/old" in message
    assert "hfpolicy convert lerobot-v2.1 user/old --output_dir=DIR" in message

    info["codebase_version"] = "v4.0"
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(UnsupportedVersionError, match="newer than the v3.0 format"):
        PolicyDataset("user/old", root=root)


def test_a_timestamp_gap_names_the_episode_and_time(tmp_path, tiny_dataset):
    root = tmp_path / "gap"
    shutil.copytree(tiny_dataset.root, root)
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    # Episode 2 (positions 17..36) loses 0.3 s from frame 8 on: timestamps jump 0.7 -> 1.1.
    index = table.column("index")
    shifted = pc.if_else(
        pc.greater_equal(index, 25),
        pc.add(table.column("timestamp"), pa.scalar(0.3, pa.float32())),
        table.column("timestamp"),
    )
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", shifted)
    pq.write_table(table, path)
    with pytest.raises(
        TimestampError, match=r"episode 2 of user/gap: the timestamp goes from 0\.7000 s \(frame_index 7\) to 1\.1000 s"
    ):
        PolicyDataset("user/gap", root=root)
    # Episodes without the gap still load.
    assert PolicyDataset("user/gap", root=root, episodes=[0, 1]).num_frames == 17


def test_delta_timestamps_must_name_features_and_fit_the_fps(tiny_dataset):
    with pytest.raises(ValueError, match=r"key 'observation.images.top', which is not a feature.*'action'"):
        PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps={"observation.images.top": [0.0]})
    with pytest.raises(ValueError, match=r"offsets \[0.05\] that are not multiples of 1/fps = 0.1000 s"):
        PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps={"action": [0.0, 0.05, 0.1]})


def test_unknown_episodes_and_missing_files(tmp_path, tiny_dataset):
    with pytest.raises(ValueError, match=r"episodes \[7\] are not in user/tiny \(it has 3 episodes"):
        PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, episodes=[0, 7])
    root = tmp_path / "partial"
    shutil.copytree(tiny_dataset.root, root)
    (root / "videos/observation.image/chunk-000/file-000.mp4").unlink()
    ds = PolicyDataset("user/partial", root=root)  # frames are decoded lazily: the error comes with the first item
    with pytest.raises(
        DatasetFormatError, match=r"episode 0 of user/partial, observation.image: the video file .* is missing"
    ):
        ds[0]
    shutil.rmtree(root / "data")
    with pytest.raises(DatasetFormatError, match="lacks the data files"):
        PolicyDataset("user/partial", root=root)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "header only"])
def test_a_damaged_mp4_is_named_with_its_episode(tmp_path, tiny_dataset, damage):
    root = tmp_path / "damaged"
    shutil.copytree(tiny_dataset.root, root)
    video = root / "videos/observation.image/chunk-000/file-000.mp4"
    data = video.read_bytes()
    video.write_bytes(
        {"truncated": data[: len(data) // 2], "garbage": b"not a video" * 50, "header only": data[:200]}[damage]
    )
    ds = PolicyDataset("user/damaged", root=root)
    with pytest.raises(DatasetFormatError) as error:
        ds.prefetch_frames(progress=False)
    message = str(error.value)
    assert message.startswith("episode 0 of user/damaged, observation.image:") and str(video) in message
    assert "download it again" in message


def _with_value(table: pa.Table, column: str, rows: list[int], value: float) -> pa.Table:
    """The table with `value` written into the vector column `column` at the given rows."""
    values = table.column(column).to_pylist()
    for row in rows:
        values[row] = [value] * len(values[row])
    position = table.schema.get_field_index(column)
    return table.set_column(position, column, pa.array(values, type=table.schema.field(column).type))


def test_nan_and_inf_in_actions_and_states_name_episodes_and_features(tmp_path, tiny_dataset):
    root = tmp_path / "nonfinite"
    shutil.copytree(tiny_dataset.root, root)
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    table = _with_value(table, "action", [13, 30], float("nan"))  # episode 1 (rows 12..16) and 2 (17..36)
    table = _with_value(table, "observation.state", [3], float("inf"))  # episode 0
    pq.write_table(table, path)
    with pytest.raises(DatasetFormatError) as error:
        PolicyDataset("user/nonfinite", root=root)
    message = str(error.value)
    assert "'action' in 2 frames of episodes 1, 2" in message
    assert "'observation.state' in 1 frames of episodes 0" in message
    assert "episodes=[...]" in message
    with pytest.raises(DatasetFormatError, match="'action' in 1 frames of episodes 2"):
        PolicyDataset("user/nonfinite", root=root, episodes=[2])


@pytest.mark.parametrize("offset", [float("nan"), float("inf"), 1e30])
def test_delta_timestamps_that_are_not_finite_or_absurdly_far(tiny_dataset, offset):
    with pytest.raises(ValueError, match=r"delta_timestamps\['action'\] has offsets .* not finite or reach beyond"):
        PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps={"action": [0.0, offset]})


def test_nan_in_stats_json_is_named(tmp_path, tiny_dataset):
    root = tmp_path / "nanstats"
    shutil.copytree(tiny_dataset.root, root)
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["max"] = [float("nan")] * len(stats["action"]["max"])
    (root / "meta/stats.json").write_text(json.dumps(stats))  # json writes NaN, as a careless tool would
    with pytest.raises(DatasetFormatError, match=r"stats of user/nanstats .* NaN or inf in action\.max"):
        PolicyDataset("user/nanstats", root=root)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fps", "ten", r'fps must be a positive number of frames per second, got "ten"'),
        ("fps", 0, "fps must be a positive number of frames per second, got 0"),
        ("features", ["action", "observation.state"], "features must be an object .* got a list"),
    ],
)
def test_bad_info_json_values_are_one_clear_error(tmp_path, tiny_dataset, field, value, message):
    root = tmp_path / "badinfo"
    shutil.copytree(tiny_dataset.root, root)
    info = json.loads((root / "meta/info.json").read_text())
    info[field] = value
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetFormatError, match=message):
        PolicyDataset("user/badinfo", root=root)


@pytest.mark.parametrize("damaged", ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet"])
def test_a_truncated_parquet_file_is_named(tmp_path, tiny_dataset, damaged):
    root = tmp_path / "cut"
    shutil.copytree(tiny_dataset.root, root)
    path = root / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(
        DatasetFormatError, match=rf"{damaged} is not a readable parquet file.*Download the dataset again"
    ):
        PolicyDataset("user/cut", root=root)
