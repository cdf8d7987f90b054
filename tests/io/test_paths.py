"""The two path fences: `contained_path` (a path named by a file stays inside its folder, links resolved) and
`check_apart` (a writer's output is neither its source, nor inside it, nor, when replaced, around it)."""

import pytest

from hfpolicy.io.paths import OutputOverlapsSourceError, OutsideFolderError, check_apart, contained_path


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "dataset"
    (root / "videos").mkdir(parents=True)
    (root / "videos" / "a.mp4").write_bytes(b"inside")
    (tmp_path / "secret.txt").write_bytes(b"outside")
    return root


def test_paths_inside_the_folder_pass(folder):
    assert contained_path(folder, "videos/a.mp4", "x") == folder / "videos" / "a.mp4"
    assert contained_path(folder, "videos/../videos/a.mp4", "x").resolve() == (folder / "videos/a.mp4").resolve()
    assert contained_path(folder, str(folder / "videos" / "a.mp4"), "x").read_bytes() == b"inside"  # absolute, inside
    (folder / "videos" / "link.mp4").symlink_to("a.mp4")  # a link that stays inside
    assert contained_path(folder, "videos/link.mp4", "x").read_bytes() == b"inside"


@pytest.mark.parametrize("relative", ["../secret.txt", "videos/../../secret.txt", "/etc/passwd", ".."])
def test_paths_that_leave_the_folder_are_refused_in_one_line(folder, relative):
    with pytest.raises(OutsideFolderError, match="meta/info.json video_path") as error:
        contained_path(folder, relative, "meta/info.json video_path")
    assert "\n" not in str(error.value) and repr(relative) in str(error.value)


def test_a_link_out_of_the_folder_is_refused(folder):
    (folder / "videos" / "b.mp4").symlink_to(folder.parent / "secret.txt")
    with pytest.raises(OutsideFolderError, match="which resolves to"):
        contained_path(folder, "videos/b.mp4", "the eval video b.mp4")
    (folder / "elsewhere").symlink_to(folder.parent, target_is_directory=True)
    with pytest.raises(OutsideFolderError):
        contained_path(folder, "elsewhere/secret.txt", "x")


def test_a_hub_cache_snapshot_may_link_into_its_own_blobs(tmp_path):
    """huggingface_hub's cache: snapshots/<commit>/<file> links to ../../blobs/<hash>; another repo's blob is out."""
    repo = tmp_path / "datasets--user--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_bytes(b"blob")
    snapshot = repo / "snapshots" / ("0" * 40)
    (snapshot / "meta").mkdir(parents=True)
    (snapshot / "meta" / "info.json").symlink_to("../../../blobs/abc123")
    assert contained_path(snapshot, "meta/info.json", "x").read_bytes() == b"blob"
    with pytest.raises(OutsideFolderError):  # a template may not name the blobs folder itself
        contained_path(snapshot, "../../blobs/abc123", "x")
    other = tmp_path / "datasets--other--repo" / "blobs"
    other.mkdir(parents=True)
    (other / "def").write_bytes(b"other")
    (snapshot / "meta" / "stats.json").symlink_to(other / "def")
    with pytest.raises(OutsideFolderError):
        contained_path(snapshot, "meta/stats.json", "x")


@pytest.mark.parametrize(
    ("output", "source", "replaces", "problem"),
    [
        ("src", "src", True, "itself"),
        ("src/out", "src", False, "lies inside the source"),
        ("src/../src", "src", True, "itself"),
        ("out", "out/src", True, "which would be replaced"),
    ],
)
def test_outputs_overlapping_their_source_are_refused(tmp_path, output, source, replaces, problem):
    (tmp_path / source).mkdir(parents=True)
    with pytest.raises(OutputOverlapsSourceError, match=problem):
        check_apart(
            tmp_path / output, tmp_path / source, output_words="--output_dir", source_words="the source",
            replaces_output=replaces,
        )  # fmt: skip


def test_outputs_apart_from_their_source_pass(tmp_path):
    (tmp_path / "src").mkdir()
    check_apart(tmp_path / "out", tmp_path / "src", output_words="o", source_words="s")
    check_apart(tmp_path / "srcx", tmp_path / "src", output_words="o", source_words="s")  # a sibling with a prefix
    check_apart(tmp_path, tmp_path / "src", output_words="o", source_words="s", replaces_output=False)  # not replaced
