"""gym-pusht's T block for the scripted expert and the dataset converter: its two boxes, frames and poses, the
keypoints of `environment_state`, and the exact coverage of the goal, area(block ∩ goal) / area(goal) (convex clipping,
no shapely). Poses are (x, y, angle) of the block body's origin, as pymunk reports `block.position` and `block.angle`.
"""

import math

import numpy as np


def rotate(vectors: np.ndarray, angle: float) -> np.ndarray:
    """Rotate vectors (..., 2) counter-clockwise by `angle` radians."""
    c, s = math.cos(angle), math.sin(angle)
    return np.stack([c * vectors[..., 0] - s * vectors[..., 1], s * vectors[..., 0] + c * vectors[..., 1]], axis=-1)


def to_world(local: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Points (..., 2) in the frame of a body at pose (x, y, angle) -> world."""
    return rotate(np.asarray(local, dtype=np.float64), float(pose[2])) + np.asarray(pose[:2], dtype=np.float64)


def to_local(world: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Points (..., 2) in the world -> the frame of a body at pose (x, y, angle)."""
    return rotate(np.asarray(world, dtype=np.float64) - np.asarray(pose[:2], dtype=np.float64), -float(pose[2]))


def batch_to_world(local: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Points local (M, 2) for each of poses (P, 3) -> (P, M, 2)."""
    c, s = np.cos(poses[:, 2])[:, None], np.sin(poses[:, 2])[:, None]
    x, y = local[None, :, 0], local[None, :, 1]
    return np.stack([c * x - s * y + poses[:, 0:1], s * x + c * y + poses[:, 1:2]], axis=-1)


def _half_planes(polys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Convex CCW polygons (..., n, 2) -> outward unit normals (..., n, 2) and offsets (..., n): inside is n.x <= c."""
    d = np.roll(polys, -1, axis=-2) - polys
    normals = np.stack([d[..., 1], -d[..., 0]], axis=-1)
    normals = normals / np.linalg.norm(normals, axis=-1, keepdims=True)
    return normals, np.einsum("...k,...k->...", normals, polys)


def _clip(polys: np.ndarray, counts: np.ndarray, normal: np.ndarray, offset: np.ndarray):
    """One Sutherland-Hodgman step: convex polygons (N, V, 2) with `counts` vertices, cut to n.x <= c (normal (N, 2),
    offset (N,)). Returns the cut polygons (N, 8, 2) (two convex quadrilaterals meet in at most 8 vertices)."""
    n_rows, width = polys.shape[:2]
    rows = np.arange(n_rows)[:, None]
    index = np.arange(width)[None]
    valid = index < counts[:, None]
    nxt = polys[rows, np.where(index + 1 < counts[:, None], index + 1, 0)]
    d_here = polys[..., 0] * normal[:, 0:1] + polys[..., 1] * normal[:, 1:2] - offset[:, None]
    d_next = nxt[..., 0] * normal[:, 0:1] + nxt[..., 1] * normal[:, 1:2] - offset[:, None]
    inside = d_here <= 0
    keep = valid & inside
    cross = valid & (inside != (d_next <= 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(cross, d_here / (d_here - d_next), 0.0)
    points = np.empty((n_rows, 2 * width, 2))
    points[:, 0::2] = polys
    points[:, 1::2] = polys + t[..., None] * (nxt - polys)
    mask = np.empty((n_rows, 2 * width), dtype=bool)
    mask[:, 0::2], mask[:, 1::2] = keep, cross
    out = np.zeros((n_rows, 8, 2))
    r, c = np.nonzero(mask)
    out[r, np.cumsum(mask, axis=1)[r, c] - 1] = points[r, c]
    return out, mask.sum(axis=1)


def _intersection_area(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Areas of the intersections of convex CCW quadrilaterals first (N, 4, 2) and second (N, 4, 2)."""
    normals, offsets = _half_planes(second)
    polys, counts = first, np.full(len(first), first.shape[1])
    for k in range(second.shape[1]):
        polys, counts = _clip(polys, counts, normals[:, k], offsets[:, k])
    index = np.arange(polys.shape[1])[None]
    nxt = polys[np.arange(len(polys))[:, None], np.where(index + 1 < counts[:, None], index + 1, 0)]
    cross = polys[..., 0] * nxt[..., 1] - polys[..., 1] * nxt[..., 0]
    return 0.5 * np.sum(np.where(index < counts[:, None], cross, 0.0), axis=1)


class TeeGeometry:
    """The T block in its own frame: its two convex pieces (boxes), outline, centre of gravity and area."""

    def __init__(self, pieces: np.ndarray, center_of_gravity: np.ndarray):
        pieces = np.array(pieces, dtype=np.float64)
        if pieces.shape != (2, 4, 2):
            raise ValueError(f"the block is not gym-pusht's T: expected 2 quadrilaterals, got {pieces.shape}")
        self.keypoint_pieces = pieces.copy()  # as given: gym-pusht's order of its environment_state keypoints
        widths = pieces[:, :, 0].max(axis=1) - pieces[:, :, 0].min(axis=1)
        pieces = pieces[np.argsort(-widths, kind="stable")]  # the bar (wide) first, then the stem
        for i, piece in enumerate(pieces):  # pymunk keeps CCW order; make sure of it
            area2 = np.sum(piece[:, 0] * np.roll(piece[:, 1], -1) - piece[:, 1] * np.roll(piece[:, 0], -1))
            if area2 < 0:
                pieces[i] = piece[::-1]
        self.pieces = pieces  # (2, 4, 2)
        self.rects = np.concatenate([pieces.min(axis=1), pieces.max(axis=1)], axis=1)  # (2, 4): x0, y0, x1, y1
        (bx0, by0, bx1, by1), (sx0, sy0, sx1, sy1) = self.rects
        if not (np.isclose(by1, sy0) and bx0 < sx0 < sx1 < bx1 and sy1 > sy0):
            raise ValueError(f"the block is not gym-pusht's T (bar {self.rects[0]}, stem {self.rects[1]})")
        # Outline, counter-clockwise: bar top, bar right end, underside, stem right side, stem end, stem left side ...
        self.outline = np.array(
            [(bx0, by0), (bx1, by0), (bx1, by1), (sx1, by1), (sx1, sy1), (sx0, sy1), (sx0, by1), (bx0, by1)]
        )
        edges = np.roll(self.outline, -1, axis=0) - self.outline
        self.edge_normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1) / np.linalg.norm(edges, axis=1)[:, None]
        incoming = edges[np.arange(len(edges)) - 1]
        self.convex = incoming[:, 0] * edges[:, 1] - incoming[:, 1] * edges[:, 0] > 0  # per vertex
        self.cog = np.array(center_of_gravity, dtype=np.float64)
        self.area = float(np.prod(self.rects[:, 2:] - self.rects[:, :2], axis=1).sum())

    @classmethod
    def from_env(cls, env) -> "TeeGeometry":
        """The T of a gym-pusht env (or a wrapper of one), its polygons in the env's keypoint order; ValueError for
        another block."""
        base = getattr(env, "unwrapped", env)
        shapes = getattr(base, "_block_shapes", None) or list(base.block.shapes)  # block.shapes is an unordered set
        pieces = np.array([[tuple(v) for v in shape.get_vertices()] for shape in shapes], dtype=np.float64)
        return cls(pieces, np.array(tuple(base.block.center_of_gravity), dtype=np.float64))

    def keypoints(self, poses: np.ndarray) -> np.ndarray:
        """gym-pusht's `environment_state` for poses (P, 3): the 8 polygon vertices in world coordinates, (P, 16)."""
        poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
        return batch_to_world(self.keypoint_pieces.reshape(-1, 2), poses).reshape(-1, 16)

    def coverage(self, poses: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Fraction of the goal T covered by the block at each pose (P, 3): gym-pusht's coverage, computed exactly."""
        poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
        flat = self.pieces.reshape(-1, 2)
        block = batch_to_world(flat, poses).reshape(len(poses), 2, 1, 4, 2)
        target = batch_to_world(flat, np.asarray(goal, dtype=np.float64)[None]).reshape(1, 1, 2, 4, 2)
        # The T is two boxes with disjoint interiors: sum the four box-box intersections.
        block, target = np.broadcast_arrays(block, target)
        areas = _intersection_area(block.reshape(-1, 4, 2), target.reshape(-1, 4, 2)).reshape(len(poses), 4)
        return areas.sum(axis=1) / self.area

    def pose_error(self, poses: np.ndarray, goal: np.ndarray, px_per_rad: float) -> np.ndarray:
        """Distance (px) of the centre of gravity from its goal plus px_per_rad times the angle error, poses (P, 3)."""
        poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
        goal = np.asarray(goal, dtype=np.float64)
        here = batch_to_world(self.cog[None], poses)[:, 0]
        there = to_world(self.cog, goal)
        angle = np.abs((poses[:, 2] - goal[2] + np.pi) % (2 * np.pi) - np.pi)
        return np.linalg.norm(here - there, axis=-1) + px_per_rad * angle

    def distance(self, points: np.ndarray) -> np.ndarray:
        """Euclidean distance (...,) from points (..., 2) (block frame) to the T (0 inside)."""
        p = np.asarray(points, dtype=np.float64)[..., None, :]
        gap = np.maximum(np.maximum(self.rects[:, :2] - p, p - self.rects[:, 2:]), 0.0)
        return np.linalg.norm(gap, axis=-1).min(axis=-1)

    def outward_normal(self, point: np.ndarray) -> np.ndarray:
        """Unit vector from the T's point nearest to `point` (block frame, outside the T) towards it."""
        nearest = np.clip(point[None], self.rects[:, :2], self.rects[:, 2:])
        k = int(np.argmin(np.linalg.norm(point[None] - nearest, axis=1)))
        away = point - nearest[k]
        if float(np.linalg.norm(away)) < 1e-9:  # on the T: away from its centre of gravity
            away = point - self.cog
        return away / max(float(np.linalg.norm(away)), 1e-9)

    def segments_clear(self, a: np.ndarray, b: np.ndarray, clearance: float) -> np.ndarray:
        """Which segments a -> b (N, 2) (block frame) keep at least `clearance` from the T."""
        a, b = np.atleast_2d(a).astype(np.float64), np.atleast_2d(b).astype(np.float64)
        lo, hi = self.rects[:, :2], self.rects[:, 2:]
        # segments through a box (slab test)
        d = (b - a)[:, None, :]
        p = a[:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            t0, t1 = (lo[None] - p) / d, (hi[None] - p) / d
        parallel = d == 0
        in_slab = (p >= lo[None]) & (p <= hi[None])
        t_lo = np.where(parallel, np.where(in_slab, -np.inf, np.inf), np.minimum(t0, t1))
        t_hi = np.where(parallel, np.where(in_slab, np.inf, -np.inf), np.maximum(t0, t1))
        enter = np.maximum(t_lo.max(axis=-1), 0.0)
        leave = np.minimum(t_hi.min(axis=-1), 1.0)
        crossing = (leave >= enter).any(axis=1)
        # otherwise the closest approach is at an end of the segment or at a corner of a box
        corners = np.concatenate(
            [self.rects[:, [0, 1]], self.rects[:, [2, 1]], self.rects[:, [2, 3]], self.rects[:, [0, 3]]]
        )
        ab = b - a
        ap = corners[:, None, :] - a[None]
        t = np.clip(np.einsum("knj,nj->kn", ap, ab) / np.maximum(np.einsum("nj,nj->n", ab, ab), 1e-12)[None], 0, 1)
        corner_dist = np.linalg.norm(corners[:, None, :] - (a[None] + t[..., None] * ab[None]), axis=-1).min(axis=0)
        dist = np.minimum(np.minimum(self.distance(a), self.distance(b)), corner_dist)
        return ~crossing & (dist >= clearance - 1e-6)

    def escape(self, point: np.ndarray, clearance: float) -> np.ndarray:
        """A point at least `clearance` from the T near `point` (block frame): straight away from the nearest box,
        then from the other one (a point in the corner between bar and stem leaves one, then the other)."""
        point = np.array(point, dtype=np.float64)
        for _ in range(4):
            nearest = np.clip(point[None], self.rects[:, :2], self.rects[:, 2:])
            gaps = np.linalg.norm(point[None] - nearest, axis=1)
            close = np.flatnonzero(gaps < clearance - 1e-6)
            if len(close) == 0:
                break
            k = close[np.argmin(gaps[close])]
            away = point - nearest[k]
            if gaps[k] < 1e-9:
                away = point - (self.rects[k, :2] + self.rects[k, 2:]) / 2
            away = away / max(float(np.linalg.norm(away)), 1e-9)
            point = nearest[k] + away * (clearance + 0.5)
        return point
