"""One atomic-write scheme (hfpolicy.io.atomic): files through `.<name>.<pid>.tmp`, folders through a locked staging."""

import os

import pytest

from hfpolicy.io.atomic import is_temporary, replacing, temporary_path, write_json_atomically
from hfpolicy.io.staging import (
    Staging,
    shared_staging_destination,
    shared_staging_path,
    shared_staging_pattern,
    staging_path,
)


def test_a_file_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "info.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="half-way"), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("stopped half-way")
    assert target.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["info.json"]  # no temporary left
    write_json_atomically(target, {"a": 1})
    assert target.read_text() == '{\n  "a": 1\n}\n' and sorted(os.listdir(tmp_path)) == ["info.json"]


def test_a_symlink_is_repointed_through_the_same_scheme(tmp_path):
    (tmp_path / "step_1").mkdir()
    (tmp_path / "step_2").mkdir()
    for step in ("step_1", "step_2"):
        with replacing(tmp_path / "last") as tmp:
            tmp.symlink_to(step)
        assert os.readlink(tmp_path / "last") == step
    assert sorted(os.listdir(tmp_path)) == ["last", "step_1", "step_2"]


def test_temporary_and_staging_names(tmp_path):
    tmp = temporary_path(tmp_path / "episode.mp4", ".mp4")
    assert tmp.name == f".episode.mp4.{os.getpid()}.tmp.mp4" and is_temporary(tmp.name)
    assert is_temporary(".eval_info.json.99999.tmp") and not is_temporary("eval_info.json")
    assert not is_temporary("notes.tmp")  # not hidden: not one of ours
    assert staging_path(tmp_path / "data", "writing").name.startswith(f".data.writing-{os.getpid()}-")
    staging = Staging.create(tmp_path / "data", "writing")
    (staging.path / "x.txt").write_text("x")
    staging.publish(tmp_path / "data")
    assert sorted(os.listdir(tmp_path / "data")) == ["x.txt"]  # the lock did not travel


def test_a_shared_staging_name_is_the_same_in_every_process_and_maps_back(tmp_path):
    """Every rank of a launch must find the one staging folder: no pid, no random part; its name maps back."""
    staged = shared_staging_path(tmp_path / "step_000500", "saving")
    assert staged == tmp_path / ".step_000500.saving"
    assert shared_staging_destination(staged.name, "saving") == "step_000500"
    for name in ("step_000500", ".saving", "step_000500.saving", ".last.123.tmp"):  # not a shared staging name
        assert shared_staging_destination(name, "saving") == name
    staged.mkdir()
    (tmp_path / "step_000400").mkdir()
    assert list(tmp_path.glob(shared_staging_pattern("saving"))) == [staged]
