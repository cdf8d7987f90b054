"""Geometry behind the scripted PushT expert: exact coverage (against gym-pusht's shapely computation), clearance
tests, and walks around the T that keep their clearance without sharp turns."""

import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
import gymnasium as gym
import numpy as np
import pytest

from hfpolicy.experts.pusht_walks import TeeGeometry, WalkAround, paced, to_local, to_world


@pytest.fixture(scope="module")
def pusht():
    env = gym.make("gym_pusht/PushT-v0", obs_type="state")
    env.reset(seed=0)
    yield env.unwrapped
    env.close()


@pytest.fixture(scope="module")
def tee(pusht):
    pieces = np.array([[tuple(v) for v in shape.get_vertices()] for shape in pusht.block.shapes])
    return TeeGeometry(pieces, np.array(pusht.block.center_of_gravity))


def test_coverage_matches_gym_pusht(pusht, tee):
    goal = np.array(pusht.goal_pose, dtype=np.float64)
    rng = np.random.default_rng(0)
    poses = np.concatenate(
        [
            goal + rng.normal(0, [1.0, 1.0, 0.01], (20, 3)),  # around the success threshold
            goal + rng.normal(0, [10.0, 10.0, 0.3], (20, 3)),
            goal + rng.normal(0, [80.0, 80.0, 2.0], (10, 3)),  # mostly no overlap
        ]
    )
    expected = []
    for x, y, angle in poses:
        pusht.block.angle = angle  # angle first: it turns the body about its centre of gravity
        pusht.block.position = (x, y)
        expected.append(pusht._get_coverage())
    np.testing.assert_allclose(tee.coverage(poses, goal), expected, atol=1e-9)
    assert tee.coverage(goal[None], goal)[0] == pytest.approx(1.0)


def test_frames_round_trip():
    pose = np.array([200.0, 300.0, 0.7])
    points = np.array([[0.0, 0.0], [10.0, -5.0], [-60.0, 120.0]])
    np.testing.assert_allclose(to_local(to_world(points, pose), pose), points, atol=1e-12)
    np.testing.assert_allclose(to_world(np.zeros(2), pose), pose[:2])


def test_segments_clear_agrees_with_dense_sampling(tee):
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-120, 170, (300, 2)), rng.uniform(-120, 170, (300, 2))
    ts = np.linspace(0, 1, 2001)[:, None]
    expected = np.array([tee.distance(a[i] + ts * (b[i] - a[i])).min() >= 23.0 for i in range(len(a))])
    got = tee.segments_clear(a, b, 23.0)
    assert np.array_equal(got, expected)
    assert 0.1 < got.mean() < 0.9  # both kinds occur


def test_walks_keep_clearance_and_turn_smoothly(tee):
    clearance = 23.0
    walk = WalkAround(tee, clearance)
    rng = np.random.default_rng(2)
    checked = 0
    while checked < 150:
        start, goal = rng.uniform(-150, 200, (2, 2))
        if tee.distance(start) < clearance or tee.distance(goal) < clearance:
            continue
        direct = tee.segments_clear(start, goal, clearance)
        length, how = walk.lengths(
            walk.ends(start[None], leaving=True),
            walk.ends(goal[None], leaving=False),
            np.array([np.linalg.norm(goal - start)]),
            direct,
        )
        path = walk.path(start, goal, int(how[0]), spacing=2.0)
        np.testing.assert_allclose(path[[0, -1]], [start, goal])
        assert np.linalg.norm(np.diff(path, axis=0), axis=1).sum() == pytest.approx(length[0], abs=1.0)
        dense = np.concatenate(
            [p + np.linspace(0, 1, 10)[:, None] * (q - p) for p, q in zip(path[:-1], path[1:], strict=True)]
        )
        assert tee.distance(dense).min() > clearance - 0.5
        moves = np.diff(path, axis=0)
        moves = moves[np.linalg.norm(moves, axis=1) > 1e-6]
        cos = (
            np.sum(moves[1:] * moves[:-1], axis=1)
            / np.linalg.norm(moves[1:], axis=1)
            / np.linalg.norm(moves[:-1], axis=1)
        )
        assert len(cos) == 0 or cos.min() > -0.5  # turns of at most 120 degrees from one point to the next
        checked += 1
    if not direct[0]:
        assert how[0] != 0


def test_paced_targets_stay_on_the_path_and_slow_down_for_corners():
    path = np.array([[0.0, 0.0], [200.0, 0.0], [200.0, 150.0]])  # a right-angle corner
    points, where = paced(path, max_step=20.0, turn_rate=0.6, accel=9.0, min_step=4.0, corner_step=4.0)
    steps = np.linalg.norm(np.diff(np.concatenate([path[:1], points]), axis=0), axis=1)
    assert steps.max() <= 20.0 + 1e-9
    np.testing.assert_allclose(points[-1], path[-1])
    np.testing.assert_allclose(where[-1], 350.0)
    assert np.all(np.diff(where) > 0)
    on_first = np.array([p[1] == 0.0 for p in points])
    on_second = np.array([np.isclose(p[0], 200.0) for p in points])
    assert np.all(on_first | on_second)  # every point lies on the polyline
    assert steps[0] == pytest.approx(9.0)  # starts from rest
    corner = int(np.argmax(where >= 200.0))
    assert steps[corner] <= 10.0 < steps[corner - 4]  # slows down into the corner ...
    assert steps[corner + 3] == pytest.approx(20.0)  # ... and speeds up again after it
    assert np.all(np.abs(np.diff(steps[:corner])) <= 9.0 + 1e-9)  # pace changes by at most accel per step
