"""Policies on the Hub: push_to_hub with eval results and videos, and the model card it writes."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import HfApi, ModelCard, hf_hub_download
from policies.toy_policy import make_toy_policy

from hfpolicy.constants import EVAL_INFO_FILE, REPLAY_VIDEO_FILE
from hfpolicy.hub import PolicyArtifacts, make_model_card
from hfpolicy.io.video import encode_video, read_video_frames
from hfpolicy.policies import Policy

ROOT = Path(__file__).resolve().parents[2]


def fake_eval_info(n_episodes: int, successes: int) -> dict:
    episodes = [
        {
            "index": i,
            "seed": 100_000 + i,
            "sum_reward": 1.5 * i,
            "max_reward": 0.1 * i,
            "success": i < successes,
            "length": 10,
        }
        for i in range(n_episodes)
    ]
    return {
        "aggregated": {
            "n_episodes": n_episodes,
            "avg_sum_reward": float(np.mean([e["sum_reward"] for e in episodes])),
            "avg_max_reward": float(np.mean([e["max_reward"] for e in episodes])),
            "pc_success": 100 * successes / n_episodes,
            "pc_success_ci95": [10.0, 90.0],
        },
        "per_episode": episodes,
    }


def test_push_to_hub_uploads_weights_card_eval_results_and_videos(hub_server, tmp_path):
    policy = make_toy_policy()
    videos = []
    for i, shade in enumerate((40, 200)):
        path = tmp_path / f"eval_episode_{i}.mp4"
        encode_video([np.full((64, 64, 3), shade + t, np.uint8) for t in range(5)], path, fps=10)
        videos.append(path)
    info = fake_eval_info(n_episodes=4, successes=3)
    policy.push_to_hub(
        "user/hub-card-toy", eval_info=info, videos=videos, dataset_repo_id="user/pusht", env_type="pusht"
    )

    files = set(HfApi().list_repo_files("user/hub-card-toy"))
    assert {"config.json", "model.safetensors", "README.md", EVAL_INFO_FILE, REPLAY_VIDEO_FILE} <= files
    assert {"eval/episode_0.mp4", "eval/episode_1.mp4"} <= files
    replay = read_video_frames(hf_hub_download("user/hub-card-toy", REPLAY_VIDEO_FILE))
    assert len(replay) == 5 and abs(int(replay[0].mean()) - 40) <= 3  # the first episode's video
    assert json.loads(Path(hf_hub_download("user/hub-card-toy", EVAL_INFO_FILE)).read_text()) == info

    card = ModelCard.load("user/hub-card-toy")
    assert card.data.library_name == "hfpolicy" and card.data.datasets == ["user/pusht"]
    assert {"robotics", "pusht", "toy"} <= set(card.data.tags)
    metrics = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert metrics == {"avg_max_reward": pytest.approx(0.15), "pc_success": 75.0, "n_episodes": 4}
    assert "| Success rate | 75.0% (95% CI 10.0–90.0%) |" in card.text
    assert f"{hub_server.endpoint}/user/hub-card-toy/resolve/main/{REPLAY_VIDEO_FILE}" in card.text

    loaded = Policy.from_pretrained("user/hub-card-toy")
    assert all(
        np.array_equal(a.detach(), b.detach()) for a, b in zip(loaded.parameters(), policy.parameters(), strict=True)
    )


def test_card_without_eval_has_no_model_index_and_save_pretrained_writes_it(tmp_path):
    policy = make_toy_policy()
    card = make_model_card("user/x", policy)
    assert card.data.eval_results is None and "## Evaluation" not in card.text
    policy.save_pretrained(tmp_path)
    saved = (tmp_path / "README.md").read_text()
    assert "library_name: hfpolicy" in saved
    # The usage lines load the policy from where it was saved (not a placeholder name).
    assert f'Policy.from_pretrained("{tmp_path}")' in saved and f"--policy.path={tmp_path} " in saved


def test_push_with_a_missing_video_fails_before_uploading(hub_server, tmp_path):
    with pytest.raises(FileNotFoundError, match="does_not_exist.mp4"):
        make_toy_policy().push_to_hub("user/hub-missing-video", videos=[tmp_path / "does_not_exist.mp4"])
    assert not HfApi().repo_exists("user/hub-missing-video")  # staged before anything is created or uploaded


def test_push_with_an_artifacts_object_writes_the_card_once(hub_server, tmp_path, monkeypatch):
    import hfpolicy.policies.card as card_module

    calls = []
    real = card_module.make_model_card
    monkeypatch.setattr(card_module, "make_model_card", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    artifacts = PolicyArtifacts(eval_info=fake_eval_info(2, 1), train_command="hfpolicy train --steps=3")
    make_toy_policy().push_to_hub("user/hub-artifacts", artifacts=artifacts)
    assert calls == ["user/hub-artifacts"]  # not once more by save_pretrained
    card = ModelCard.load("user/hub-artifacts")
    assert "hfpolicy train --steps=3" in card.text and "| Success rate | 50.0%" in card.text
    with pytest.raises(TypeError, match="either artifacts= or its fields"):
        make_toy_policy().push_to_hub("user/hub-artifacts", artifacts=artifacts, env_type="pusht")


def test_policies_never_import_publishing_training_or_evaluation():
    """Dependencies point one way: hfpolicy.policies imports nothing of hub/push/eval/train (not even lazily)."""
    above = ("hfpolicy.hub", "hfpolicy.eval", "hfpolicy.training", "hfpolicy.record", "hfpolicy.cli")
    offenders = []
    for path in (ROOT / "hfpolicy" / "policies").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if any(n == a or n.startswith(f"{a}.") for a in above)
            ]
    assert not offenders


def test_staging_a_policy_repo_does_not_import_evaluation():
    code = (
        "import sys, tempfile\nsys.path.insert(0, 'tests')\nfrom policies.toy_policy import make_toy_policy\n"
        "from hfpolicy.hub import PolicyArtifacts, stage_policy_repo\n"
        "folder = stage_policy_repo(make_toy_policy(), tempfile.mkdtemp(), 'user/x', PolicyArtifacts(env_type='pusht'))\n"
        "print(sorted(p.name for p in folder.iterdir()), 'hfpolicy.eval' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['README.md', 'config.json', 'model.safetensors'] False"
