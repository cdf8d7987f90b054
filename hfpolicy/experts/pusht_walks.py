"""The scripted PushT expert's walks of the agent around the T (WalkAround) and their pacing (paced); the T itself is
hfpolicy.envs.pusht_tee, whose names are re-exported here."""

import math

import numpy as np

from hfpolicy.envs.pusht_tee import TeeGeometry, batch_to_world, rotate, to_local, to_world

__all__ = ["TeeGeometry", "WalkAround", "batch_to_world", "paced", "rotate", "to_local", "to_world"]


def _convex_hull(points: np.ndarray) -> np.ndarray:
    """Counter-clockwise convex hull (monotone chain) of points (N, 2)."""
    pts = sorted(map(tuple, np.asarray(points, dtype=np.float64)))

    def half(seq):
        out: list[tuple[float, float]] = []
        for p in seq:
            while len(out) >= 2:
                (ax, ay), (bx, by) = out[-2], out[-1]
                if (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax) > 1e-9:
                    break
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(reversed(pts))
    return np.array(lower[:-1] + upper[:-1])


def _point_segment_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distances (N, K) from points (N, 2) to segments a -> b (K, 2), and the segment parameters (N, K) in [0, 1]."""
    ab = b - a
    ap = points[:, None, :] - a[None]
    t = np.clip(np.einsum("nkj,kj->nk", ap, ab) / np.einsum("kj,kj->k", ab, ab)[None], 0.0, 1.0)
    closest = a[None] + t[..., None] * ab[None]
    return np.linalg.norm(points[:, None, :] - closest, axis=-1), t


class WalkAround:
    """Walks of the agent's centre around the T that keep `clearance` from it: straight when that keeps it, else along
    a tangent onto the T's convex hull grown by `clearance`, around it one way or the other, and along a tangent off
    it (points inside the grown hull, in the corners between bar and stem, join and leave it straight)."""

    def __init__(self, tee: TeeGeometry, clearance: float):
        self.tee = tee
        self.radius = float(clearance)
        self.corners = _convex_hull(tee.outline)  # (K, 2) CCW
        edges = np.roll(self.corners, -1, axis=0) - self.corners
        self.edge_len = np.linalg.norm(edges, axis=1)
        self.edge_dir = edges / self.edge_len[:, None]
        self.normals = np.stack([self.edge_dir[:, 1], -self.edge_dir[:, 0]], axis=1)
        before = np.roll(self.normals, 1, axis=0)  # normal of the edge ending at corner i
        self.arc_start = np.arctan2(before[:, 1], before[:, 0])
        self.arc_sweep = (np.arctan2(self.normals[:, 1], self.normals[:, 0]) - self.arc_start) % (2 * np.pi)
        arc_len = self.radius * self.arc_sweep
        # Boundary, counter-clockwise: arc at corner 0, side 0, arc at corner 1, side 1, ...
        piece_len = np.stack([arc_len, self.edge_len], axis=1).reshape(-1)
        starts = np.concatenate([[0.0], np.cumsum(piece_len)[:-1]]).reshape(-1, 2)
        self.arc_pos, self.edge_pos = starts[:, 0], starts[:, 1]
        self.perimeter = float(piece_len.sum())

    # positions along the boundary ---------------------------------------------------------------------------------

    def point_at(self, u: float) -> np.ndarray:
        u = u % self.perimeter
        i = int(np.searchsorted(self.arc_pos, u, side="right")) - 1
        if u < self.edge_pos[i]:
            angle = self.arc_start[i] + (u - self.arc_pos[i]) / self.radius
            return self.corners[i] + self.radius * np.array([math.cos(angle), math.sin(angle)])
        return self.corners[i] + self.radius * self.normals[i] + (u - self.edge_pos[i]) * self.edge_dir[i]

    def _nearest_on_boundary(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For points (N, 2): the nearest boundary point (N, 2), its position u (N,), and whether the point lies
        inside the grown hull (N,)."""
        a, b = self.corners, np.roll(self.corners, -1, axis=0)
        dist, t = _point_segment_distance(points, a, b)
        k = np.argmin(dist, axis=1)
        rows = np.arange(len(points))
        t_k = t[rows, k]
        q = a[k] + t_k[:, None] * (b[k] - a[k])
        outside_poly = np.any(np.einsum("nkj,kj->nk", points[:, None, :] - a[None], self.normals) > 0, axis=1)
        away = points - q
        norm = np.linalg.norm(away, axis=1)
        direction = np.where(
            (outside_poly & (norm > 1e-9))[:, None], away / np.maximum(norm, 1e-9)[:, None], self.normals[k]
        )
        boundary = q + self.radius * direction
        inside = ~outside_poly | (norm < self.radius)
        # position: on the side k unless the nearest point is a corner (then on that corner's arc)
        corner = np.where(t_k <= 1e-9, k, np.where(t_k >= 1 - 1e-9, (k + 1) % len(a), -1))
        u = self.edge_pos[k] + t_k * self.edge_len[k]
        on_arc = corner >= 0
        if on_arc.any():
            c = corner[on_arc]
            angle = np.arctan2(direction[on_arc, 1], direction[on_arc, 0])
            rel = np.clip((angle - self.arc_start[c]) % (2 * np.pi), 0.0, self.arc_sweep[c])
            rel = np.where((angle - self.arc_start[c]) % (2 * np.pi) > np.pi + self.arc_sweep[c] / 2, 0.0, rel)
            u[on_arc] = self.arc_pos[c] + self.radius * rel
        return boundary, u, inside

    def _tangents(self, points: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
        """Where lines from points (N, 2) outside the grown hull touch it, travelling with the hull on the left
        (side +1) or on the right (side -1): the touching points (N, 2) and their positions u (N,)."""
        c = self.corners[None]  # (1, K, 2)
        to_c = c - points[:, None, :]
        dist = np.linalg.norm(to_c, axis=-1)
        ratio = np.clip(self.radius / np.maximum(dist, 1e-9), -1.0, 1.0)
        angle = -side * np.arcsin(ratio)
        unit = to_c / np.maximum(dist, 1e-9)[..., None]
        cos, sin = np.cos(angle), np.sin(angle)
        direction = np.stack([cos * unit[..., 0] - sin * unit[..., 1], sin * unit[..., 0] + cos * unit[..., 1]], -1)
        touch = points[:, None, :] + direction * np.sqrt(np.maximum(dist**2 - self.radius**2, 0.0))[..., None]
        rel = (np.arctan2(touch[..., 1] - c[..., 1], touch[..., 0] - c[..., 0]) - self.arc_start[None]) % (2 * np.pi)
        overshoot = np.minimum(np.maximum(rel - self.arc_sweep[None], 0.0), 2 * np.pi - rel)  # 0 when on the arc
        k = np.argmin(overshoot, axis=1)
        rows = np.arange(len(points))
        rel_k = np.clip(rel[rows, k], 0.0, self.arc_sweep[k])
        rel_k = np.where(rel[rows, k] > np.pi + self.arc_sweep[k] / 2, 0.0, rel_k)
        return touch[rows, k], self.arc_pos[k] + self.radius * rel_k

    def ends(self, points: np.ndarray, leaving: bool) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """How points (N, 2) join (leaving=True: walks start there) or leave (False: walks end there) the hull's
        boundary when travelling counter-clockwise (+1) or clockwise (-1) around it: {direction: (boundary point
        (N, 2), its position u (N,), length of the straight leg (N,))}."""
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        boundary, u_near, inside = self._nearest_on_boundary(points)
        out = {}
        for direction in (1, -1):
            side = direction if leaving else -direction
            touch, u = self._tangents(points, side)
            touch = np.where(inside[:, None], boundary, touch)
            u = np.where(inside, u_near, u)
            out[direction] = (touch, u, np.linalg.norm(touch - points, axis=1))
        return out

    def lengths(self, start_ends, goal_ends, direct_len: np.ndarray, direct_ok: np.ndarray):
        """Walk lengths from one start to many goals (from `ends`): (length (N,), direction (N,): 0 straight, +1
        counter-clockwise, -1 clockwise)."""
        best = np.where(direct_ok, direct_len, np.inf)
        how = np.zeros(len(direct_len), dtype=int)
        for direction in (1, -1):
            _, u0, leg0 = start_ends[direction]
            _, u1, leg1 = goal_ends[direction]
            along = ((u1 - u0) * direction) % self.perimeter
            total = leg0 + along + leg1
            better = total < best - 1e-9
            best = np.where(better, total, best)
            how = np.where(better, direction, how)
        return best, how

    def path(self, start: np.ndarray, goal: np.ndarray, direction: int, spacing: float = 4.0) -> np.ndarray:
        """The walk's polyline (block frame) from start to goal: straight (direction 0) or around the hull."""
        if direction == 0:
            return np.array([start, goal], dtype=np.float64)
        a_touch, a_u, _ = (x[0] for x in self.ends(start[None], leaving=True)[direction])
        b_touch, b_u, _ = (x[0] for x in self.ends(goal[None], leaving=False)[direction])
        along = ((b_u - a_u) * direction) % self.perimeter
        count = int(along // spacing)
        middle = [self.point_at(a_u + direction * along * k / (count + 1)) for k in range(1, count + 1)]
        return np.array([start, a_touch, *middle, b_touch, goal], dtype=np.float64)


def paced(
    path: np.ndarray, max_step: float, turn_rate: float, accel: float, min_step: float, corner_step: float
) -> tuple[list, np.ndarray]:
    """Per-step points along a polyline (its last point included) and their arc-length positions, at a human-like
    pace: at most `max_step` apart, slower through bends (at most `turn_rate` radians per step, sharp corners at
    `corner_step`), changing pace by at most `accel` per step (from rest), never under `min_step`."""
    seg = np.diff(path, axis=0)
    seg_len = np.linalg.norm(seg, axis=1)
    keep = seg_len > 1e-9
    if not keep.any():
        return [np.array(path[-1], dtype=np.float64)], np.zeros(1)
    pts = np.concatenate([path[:1], path[1:][keep]])
    seg, seg_len = seg[keep], seg_len[keep]
    cum = np.concatenate([[0.0], np.cumsum(seg_len)])
    total = float(cum[-1])
    # speed limit at each interior vertex from its bend: radius ~ chord / (2 sin(turn / 2)) over a short chord
    unit = seg / seg_len[:, None]
    cos = np.clip(np.sum(unit[1:] * unit[:-1], axis=1), -1.0, 1.0)
    turn = np.arccos(cos)
    chord = np.minimum(np.minimum(seg_len[1:], seg_len[:-1]), 4.0)
    with np.errstate(divide="ignore"):
        radius = np.where(turn > 1e-6, chord / (2.0 * np.sin(turn / 2.0)), np.inf)
    limit = np.clip(turn_rate * radius, corner_step, max_step)
    corner_pos = cum[1:-1]

    def can_take(step: float, distance: float, slowest: float) -> bool:
        """Whether a step of this length still lets the steps that follow slow down (by `accel` each) so that the
        step that reaches a bend `distance` ahead is at most `slowest` long."""
        left = distance - step
        if left <= 1e-9:  # this step reaches the bend
            return step <= slowest
        speed = step - accel
        while speed > slowest:
            left -= speed
            if left <= 1e-9:
                return False
            speed -= accel
        return True

    out, where = [], []
    s, v = 0.0, 0.0
    while s < total - 1e-9:
        v = min(v + accel, max_step)
        ahead = np.flatnonzero((corner_pos > s + 1e-9) & (corner_pos < s + 4.0 * max_step))
        while v > min_step and not all(can_take(v, corner_pos[j] - s, limit[j]) for j in ahead):
            v = max(v - 0.5, min_step)
        s = min(s + v, total)
        j = min(int(np.searchsorted(cum, s, side="right")) - 1, len(seg) - 1)
        out.append(pts[j] + (s - cum[j]) / seg_len[j] * seg[j])
        where.append(s)
    return out, np.array(where)
