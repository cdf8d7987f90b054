"""Damaged diffusion_policy zarr stores: `hfpolicy convert pusht-zarr` validates what it converts (missing or
undecodable chunks, non-finite values, shapes, episode ends) and names the array and the chunk, writing nothing."""

import shutil

import numpy as np
import pytest
import zarr

from hfpolicy.datasets.convert import main as convert_main

N_FRAMES = 279  # the first two human demonstrations (episode ends 161, 279)


@pytest.fixture(scope="module")
def small_zarr(pusht_zarr_path, tmp_path_factory):
    """A two-episode copy of the real zarr, in its layout (zarr v2, 161-frame chunks)."""
    source = zarr.open_group(str(pusht_zarr_path), mode="r")
    path = tmp_path_factory.mktemp("zarr") / "small.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    for name, chunk in (("data/img", 161), ("data/state", 161), ("data/action", 161), ("meta/episode_ends", 2)):
        values = source[name][:2] if name == "meta/episode_ends" else source[name][:N_FRAMES]
        array = group.create_array(name, shape=values.shape, dtype=values.dtype, chunks=(chunk, *values.shape[1:]))
        array[:] = values
    return path


def damaged_copy(small_zarr, tmp_path, damage) -> str:
    path = tmp_path / "damaged.zarr"
    shutil.copytree(small_zarr, path)
    damage(path)
    return str(path)


def set_values(name, index, value):
    def damage(path):
        array = zarr.open_group(str(path), mode="r+")[name]
        values = array[:]
        values[index] = value
        array[:] = values

    return damage


def cut_short(path):
    """A metadata file as a copy that broke off leaves it."""
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: (p / "data/img/1.0.0.0").unlink(), "data/img lacks chunk file(s) [1]"),
        (lambda p: (p / "data/state/0.0").write_bytes(b"not blosc"), "data/state chunk 0 cannot be decoded"),
        (
            set_values("data/action", (200, 0), np.nan),
            "data/action holds NaN or inf in 1 rows (first: row 200, chunk 1)",
        ),
        (set_values("data/state", (3, 4), np.inf), "data/state holds NaN or inf in 1 rows (first: row 3, chunk 0)"),
        (
            set_values("meta/episode_ends", 1, 300),
            "meta/episode_ends must rise strictly from > 0 to the frame count 279",
        ),
        (set_values("meta/episode_ends", 1, 100), "meta/episode_ends must rise strictly"),
        (set_values("data/img", (5, 0, 0, 0), np.nan), "data/img: images must hold values in 0..255, chunk 0"),
        (lambda p: cut_short(p / "data/state/.zarray"), "data/state/.zarray is not a JSON object"),
        (lambda p: cut_short(p / ".zgroup"), ".zgroup is not a JSON object"),
        (lambda p: (p / ".zgroup").unlink(), "holds no zarr group (no .zgroup or zarr.json)"),
    ],
)
def test_a_damaged_store_is_refused_naming_array_and_chunk(small_zarr, tmp_path, capsys, damage, message):
    path = damaged_copy(small_zarr, tmp_path, damage)
    out = tmp_path / "out"
    assert convert_main(["pusht-zarr", path, f"--output_dir={out}"]) == 2
    last_line = capsys.readouterr().err.splitlines()[-1]  # image chunks are checked as they are converted (a bar)
    assert last_line.startswith("hfpolicy convert pusht-zarr: error:") and message in last_line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["damaged.zarr"]


def test_the_intact_small_store_converts(small_zarr, tmp_path, capsys):
    assert convert_main(["pusht-zarr", str(small_zarr), f"--output_dir={tmp_path / 'out'}"]) == 0
    assert "2 episodes, 279 frames" in capsys.readouterr().out


def test_the_dataset_is_never_written_inside_the_store(small_zarr, tmp_path, capsys):
    """An --output_dir inside the zarr (or the zarr itself) is refused in one line before anything is written."""
    store = tmp_path / "store.zarr"
    shutil.copytree(small_zarr, store)
    before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    for out in (store / "lerobot", store):
        argv = ["pusht-zarr", str(store), f"--output_dir={out}", "--episodes=[0]", "--overwrite=true"]
        assert convert_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"the zarr {store}" in err
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == before
