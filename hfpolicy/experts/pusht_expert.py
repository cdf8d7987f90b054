"""A scripted PushT expert: from the env's privileged state it plans one push at a time on a private copy of gym-pusht's
simulator (screening candidate pushes, replaying the best few exactly) and returns the agent's next target every step.
It is deterministic and never steps the env; docs/datasets.md#the-scripted-pusht-expert tells how it plans."""

import math
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pymunk

from hfpolicy.experts.episodes import ExpertEpisode, run_episode
from hfpolicy.experts.pusht_walks import TeeGeometry, WalkAround, paced, rotate, to_local, to_world


@dataclass
class PushTExpertConfig:
    """Knobs of the scripted PushT expert (the defaults meet issue 7's quality bar)."""

    max_step_px: float = 20.0  # the commanded target moves at most this far per env step
    turn_rate: float = 0.6  # ... and turns at most this many radians per step in bends (slowing down for them)
    accel_px: float = 9.0  # ... and changes its step length by at most this much per step
    corner_step_px: float = 16.0  # ... and takes sharp corners (joining the run-up, leaving the block) this fast
    min_step_px: float = 4.0  # ... but never moves less than this while going somewhere
    walk_margin_px: float = 8.0  # clearance kept between the agent's disk and the block while walking around it
    approach_px: float = 30.0  # straight run-up along the push direction before the contact
    contact_spacing_px: float = 12.0  # spacing of candidate contact points along the T's outline
    corner_fan: int = 3  # extra push normals tried at each convex corner of the T
    tilt_deg: float = 30.0  # candidate pushes also tilt the push direction by +-this much from the inward normal
    carry_on_deg: float = 60.0  # when touching the block, also push on from there, turning up to +-this much ...
    carry_on_count: int = 7  # ... in this many directions
    contact_px: float = 4.0  # the agent counts as touching the block within this gap
    max_push_px: float = 160.0  # longest push considered at once
    screen_dt: float = 0.04  # pymunk time step of the coarse screening pushes (the env steps at 0.01)
    n_verify: int = 5  # candidates replayed exactly before one is chosen ...
    n_verify_near: int = 12  # ... or this many when the block is near the goal (pose error < coverage_check_px)
    n_refine: int = 2  # near misses (coverage > 0.9) replayed again with the push lengthened or shortened ...
    refine_px: tuple[float, ...] = (-6.0, -3.0, 3.0, 6.0)  # ... by these many pixels
    settle_px: float = 8.0  # after a push, hold the target until the agent is this close to it ...
    max_hold_steps: int = 4  # ... or for at most this many steps
    steps_per_px: float = 0.3  # cost-to-go: steps per pixel of pose error
    px_per_rad: float = 60.0  # pose error: pixels that one radian of angle error counts as
    push_overhead_steps: float = 8.0  # cost-to-go: steps of one more walk-and-push cycle
    coverage_check_px: float = 30.0  # compute the exact coverage only for poses with less pose error than this
    coverage_px: float = 52.0  # near the goal the pose error counts as (1 - coverage) times this
    # labelling another driver's states (`PushTExpert.label`, DAgger): keep following the current plan while ...
    follow_target_px: float = 8.0  # ... the last commanded target is within this of the plan's, and ...
    follow_block_px: float = 4.0  # ... the block is within this (centre) ...
    follow_block_rad: float = 0.06  # ... and this (angle) of where the plan predicted; otherwise re-plan


@dataclass
class PushTEpisode(ExpertEpisode):
    """What `run_expert_episode` returns: the episode, and the expert's record of it."""

    coverages: np.ndarray  # (n_steps,) goal coverage after each step
    planning_cpu_s: float  # CPU time (time.process_time) the expert spent planning during the episode
    planning_wall_s: float  # wall time the expert spent planning during the episode
    n_plans: int  # pushes planned during the episode
    agent_start: np.ndarray  # (2,) the agent's position after reset (the reference of the first target move)
    phase_starts: list[int]  # steps at which a phase began: each plan's walk, and its push after the walk


class NotPushTEnvError(TypeError):
    """The scripted PushT expert was given something that is not a (reset) gym-pusht PushT env."""


class _PushSimulator:
    """A private pymunk space built like a PushTEnv's (walls, agent, T block, solver settings)."""

    def __init__(self, env) -> None:
        self.kp, self.kv, self.dt = float(env.k_p), float(env.k_v), float(env.dt)
        self.substeps = int(round(1 / (env.dt * env.control_hz)))
        source = env.space
        space = pymunk.Space()
        for name in ("gravity", "damping", "iterations", "collision_slop", "collision_bias", "collision_persistence"):
            setattr(space, name, getattr(source, name))
        agent = pymunk.Body(body_type=pymunk.Body.KINEMATIC)
        block = pymunk.Body(env.block.mass, env.block.moment)
        space.add(agent, block)
        # Shapes in the env's order (Space.shapes keeps it; Body.shapes is a set): the solver's order stays the same.
        for shape in source.shapes:
            if shape.body is source.static_body and isinstance(shape, pymunk.Segment):
                space.add(pymunk.Segment(space.static_body, shape.a, shape.b, shape.radius))
            elif shape.body is env.agent and isinstance(shape, pymunk.Circle):
                space.add(pymunk.Circle(agent, shape.radius, shape.offset))
                self.agent_radius = float(shape.radius)
            elif shape.body is env.block and isinstance(shape, pymunk.Poly):
                space.add(pymunk.Poly(block, shape.get_vertices()))
        block.center_of_gravity = env.block.center_of_gravity
        self.space, self.agent, self.block = space, agent, block

    def load(self, agent_pos, agent_vel, block_pose, block_vel=(0.0, 0.0), block_spin=0.0) -> None:
        self.agent.position = (float(agent_pos[0]), float(agent_pos[1]))
        self.agent.velocity = (float(agent_vel[0]), float(agent_vel[1]))
        # Angle before position: setting the angle turns the body about its centre of gravity.
        self.block.angle = float(block_pose[2])
        self.block.position = (float(block_pose[0]), float(block_pose[1]))
        self.block.velocity = (float(block_vel[0]), float(block_vel[1]))
        self.block.angular_velocity = float(block_spin)

    def slide(self, velocity: np.ndarray, n_substeps: int, dt: float) -> np.ndarray:
        """Move the agent at constant velocity; the block's poses (n_substeps, 3) after each substep."""
        agent, step, block = self.agent, self.space.step, self.block
        vel = (float(velocity[0]), float(velocity[1]))
        poses = np.empty((n_substeps, 3))
        for i in range(n_substeps):
            agent.velocity = vel
            step(dt)
            x, y = block.position
            poses[i] = x, y, block.angle
        return poses

    def rollout(self, targets: np.ndarray, settle_px: float, max_hold: int) -> tuple[np.ndarray, np.ndarray]:
        """Env steps toward each target (the env's PD control), then holding the last one until the agent is within
        settle_px of it (at most max_hold steps): the targets of all steps (T, 2), the block's pose after each (T, 3)."""
        kp, kv, dt, substeps = self.kp, self.kv, self.dt, self.substeps
        agent, step, block = self.agent, self.space.step, self.block
        px, py = agent.position
        vx, vy = agent.velocity
        last = targets[-1]
        executed, poses = [], []
        i = n_hold = 0
        while True:
            if i < len(targets):
                ax, ay = float(targets[i][0]), float(targets[i][1])
            elif math.hypot(px - last[0], py - last[1]) <= settle_px or n_hold >= max_hold:
                break
            else:
                ax, ay = float(last[0]), float(last[1])
                n_hold += 1
            for _ in range(substeps):  # as PushTEnv.step: velocity += (kp (target - p) - kv v) dt, then physics
                vx = vx + (kp * (ax - px) + kv * (0.0 - vx)) * dt
                vy = vy + (kp * (ay - py) + kv * (0.0 - vy)) * dt
                agent.velocity = (vx, vy)
                step(dt)
                px = px + vx * dt
                py = py + vy * dt
            x, y = block.position
            executed.append((ax, ay))
            poses.append((x, y, block.angle))
            i += 1
        return np.array(executed, dtype=np.float64), np.array(poses, dtype=np.float64)


@dataclass
class _Candidates:
    direction: np.ndarray  # (C, 2) unit push direction
    touch: np.ndarray  # (C, 2) agent centre when it touches the block
    start: np.ndarray  # (C, 2) agent centre where the straight run-up begins
    run_up: np.ndarray  # (C,) length of the run-up (start -> touch)


def _lay_out_candidates(tee: TeeGeometry, radius: float, clearance: float, cfg: PushTExpertConfig) -> _Candidates:
    contacts, normals = [], []
    outline, n_vertices = tee.outline, len(tee.outline)
    for i in range(n_vertices):
        a, b = outline[i], outline[(i + 1) % n_vertices]
        length = float(np.linalg.norm(b - a))
        lo = 0.0 if tee.convex[i] else radius + 0.5  # a disk cannot reach into a concave corner
        hi = length if tee.convex[(i + 1) % n_vertices] else length - radius - 0.5
        if hi < lo:
            continue
        count = max(int(math.ceil((hi - lo) / cfg.contact_spacing_px)), 1)
        for t in np.linspace(lo, hi, count + 1):
            contacts.append(a + (b - a) * t / length)
            normals.append(tee.edge_normals[i])
    for i in range(n_vertices):  # fans of normals at convex corners
        if not tee.convex[i]:
            continue
        n_in, n_out = tee.edge_normals[i - 1], tee.edge_normals[i]
        first = math.atan2(n_in[1], n_in[0])
        sweep = math.atan2(n_in[0] * n_out[1] - n_in[1] * n_out[0], float(n_in @ n_out))
        for k in range(1, cfg.corner_fan + 1):
            angle = first + sweep * k / (cfg.corner_fan + 1)
            contacts.append(outline[i])
            normals.append(np.array([math.cos(angle), math.sin(angle)]))
    tilt = math.radians(cfg.tilt_deg)
    rows = []
    for contact, normal in zip(contacts, normals, strict=True):
        touch = contact + radius * normal
        for angle in (0.0, -tilt, tilt):
            direction = rotate(-normal, angle)
            # The run-up starts at least approach_px back, clear of the walking margin, and never comes closer to
            # the block than the agent's radius before the touch.
            run_up = cfg.approach_px
            while tee.distance(touch - run_up * direction) < clearance and run_up < 150.0:
                run_up += 5.0
            start = touch - run_up * direction
            if tee.distance(start) < clearance:
                continue
            along = touch[None] - np.linspace(run_up, 1.0, int(run_up // 2) + 2)[:, None] * direction[None]
            if tee.distance(along).min() < radius - 0.25:
                continue
            rows.append((direction, touch, start, run_up))
    return _Candidates(*(np.array(column, dtype=np.float64) for column in zip(*rows, strict=True)))


def _unwrap_pusht(env):
    from gym_pusht.envs.pusht import PushTEnv

    base = env.unwrapped if isinstance(env, gym.Env) else env
    if not isinstance(base, PushTEnv):
        raise NotPushTEnvError(
            f"PushTExpert plans on gym-pusht's PushT simulator, got {type(base).__name__}; pass the env made by "
            "gym.make('gym_pusht/PushT-v0', ...) (or its .unwrapped)"
        )
    if getattr(base, "space", None) is None or getattr(base, "block", None) is None:
        raise NotPushTEnvError("the PushT env has no simulator state yet: call env.reset(seed=...) before the expert")
    return base


class PushTExpert:
    """Scripted PushT demonstrator: `reset(env)` after each `env.reset`, then `act(env)` (the next target, float32
    (2,), at most `config.max_step_px` from the last) before every `env.step`. Per episode it keeps `planning_cpu_s`,
    `planning_wall_s`, `n_plans` and `phase_starts` (the step of each plan's walk and of its push after the walk)."""

    def __init__(self, config: PushTExpertConfig | None = None) -> None:
        self.config = config or PushTExpertConfig()
        self._env: Any = None  # gym-pusht's PushTEnv (untyped), after reset(env)
        self._layout_key: tuple | None = None

    def reset(self, env) -> None:
        """Start a new episode on `env` (already reset): read its geometry, build the planner's copy of it."""
        base = _unwrap_pusht(env)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        cfg = self.config
        try:
            self.tee = TeeGeometry.from_env(base)
        except ValueError as error:
            raise NotPushTEnvError(str(error)) from None
        self._env, self._space = base, base.space
        self.sim = _PushSimulator(base)
        self.radius = self.sim.agent_radius
        self.clearance = self.radius + cfg.walk_margin_px
        self.success_threshold = float(base.success_threshold)
        self.goal = np.array(base.goal_pose, dtype=np.float64)
        key = (self.tee.pieces.tobytes(), self.tee.cog.tobytes(), self.radius, repr(cfg))
        if self._layout_key != key:  # the same T every episode: lay the candidates out once
            self.walk = WalkAround(self.tee, self.clearance)
            self.cands = _lay_out_candidates(self.tee, self.radius, self.clearance, cfg)
            self._cand_ends = self.walk.ends(self.cands.start, leaving=False)
            self._layout_key = key
        self.agent_start = np.array(base.agent.position, dtype=np.float64)
        self._last_target = self.agent_start.copy()
        self._plan: list[np.ndarray] = []
        self._plan_poses: list[np.ndarray] = []  # the block pose the plan predicts after each of its targets
        self._expected_pose: np.ndarray | None = None  # the pose predicted after the last target given
        self._executed: list[np.ndarray] = []
        self.phase_starts: list[int] = []
        self.n_plans = 0
        self.n_replans = 0  # plans `label` started because the driver left the current one
        self.planning_cpu_s = time.process_time() - cpu0
        self.planning_wall_s = time.perf_counter() - wall0

    def act(self, env=None) -> np.ndarray:
        """The next target (float32 (2,)) for the env's current state."""
        if self._env is None:
            raise RuntimeError("call expert.reset(env) after env.reset() before asking for actions")
        if env is not None and _unwrap_pusht(env) is not self._env:
            raise RuntimeError("this env is not the one the expert was reset on: call expert.reset(env) first")
        if self._env.space is not self._space:  # PushTEnv builds a new space at every reset
            raise RuntimeError("the env was reset since expert.reset(env): call expert.reset(env) after env.reset()")
        if not self._plan:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            self._plan, push_start, self._plan_poses = self._plan_push()
            self.planning_cpu_s += time.process_time() - cpu0
            self.planning_wall_s += time.perf_counter() - wall0
            self.n_plans += 1
            self.phase_starts.append(len(self._executed))
            if 0 < push_start < len(self._plan):
                self.phase_starts.append(len(self._executed) + push_start)
        target = self._plan.pop(0)
        self._expected_pose = self._plan_poses.pop(0) if self._plan_poses else None
        self._last_target = target
        self._executed.append(target)
        return target.astype(np.float32)

    def label(self, env, last_target: np.ndarray) -> np.ndarray:
        """The target the expert would command now when another driver (a policy) commanded `last_target` before
        (DAgger labels). It keeps to its plan while the driver stays on it (config.follow_*), else re-plans from the
        env's true state and counts `n_replans`; driven by its own labels it acts exactly as `act`."""
        last_target = np.asarray(last_target, dtype=np.float64).reshape(2)
        if self._env is None:
            raise RuntimeError("call expert.reset(env) after env.reset() before asking for labels")
        if not self._follows_plan(last_target):
            self._plan, self._plan_poses = [], []
            self._last_target = last_target.copy()
            self.n_replans += 1
        return self.act(env)

    def _follows_plan(self, last_target: np.ndarray) -> bool:
        """Whether the env is still where the current plan expects it (see `label`)."""
        cfg, block = self.config, self._env.block
        if not self._plan or self._expected_pose is None:
            # between plans: on it if the driver commanded the plan's last target (up to float32 rounding)
            return not self._executed or bool(np.linalg.norm(last_target - self._last_target) <= 1e-3)
        if np.linalg.norm(last_target - self._last_target) > cfg.follow_target_px:
            return False
        expected = self._expected_pose
        moved = math.hypot(block.position[0] - expected[0], block.position[1] - expected[1])
        turned = abs((block.angle - expected[2] + math.pi) % (2 * math.pi) - math.pi)
        return moved <= cfg.follow_block_px and turned <= cfg.follow_block_rad

    def _plan_push(self) -> tuple[list[np.ndarray], int, list[np.ndarray]]:
        """The next push's per-step targets, the index of its first target past the walk, and the block pose
        predicted after each target."""
        env = self._env
        pose = np.array([env.block.position[0], env.block.position[1], env.block.angle], dtype=np.float64)
        stay = [self._last_target.copy()], 0, [pose.copy()]

        # The walk starts at the last target (block frame); after a push it first steps out of the walking margin.
        origin = to_local(self._last_target, pose)
        escape, walk_len, how = self._walks_to_candidates(origin)
        touch_l, dir_l, start_l, run_up, walk_len, how = self._candidates(origin, walk_len, how)
        n_fixed = len(self.cands.touch)

        # Feasible: reachable, with the run-up start inside the arena.
        touch_w, start_w = to_world(touch_l, pose), to_world(start_l, pose)
        dir_w = rotate(dir_l, float(pose[2]))
        idx = np.flatnonzero(np.isfinite(walk_len) & np.all((start_w > 2.0) & (start_w < 510.0), axis=1))
        if len(idx) == 0:
            return stay
        error_now = float(self.tee.pose_error(pose[None], self.goal, self.config.px_per_rad)[0])
        to_go_now = float(self._to_go(pose[None])[0][0])
        lead_in = walk_len[idx] + run_up[idx]  # the walk to each candidate's run-up and the run-up itself
        exact_len, score = self._screen(pose, error_now, to_go_now, touch_w[idx], dir_w[idx], lead_in)

        # Verification: replay the best few exactly, as they would be executed.
        velocities = (np.array(env.agent.velocity), np.array(env.block.velocity), float(env.block.angular_velocity))
        context = (pose, np.array(env.agent.position), velocities, to_go_now)
        tried = []
        for row, length in self._best_rows(score, exact_len, error_now):
            c = idx[row]
            walk = self._walk_path(origin, escape, start_l[c], how[c], pose) if c < n_fixed else origin[None]
            if walk is not None:
                tried.append(self._replay(context, walk, touch_l[c], dir_l[c], length))
        if not tried:
            return stay
        # Near misses: a few pixels more or less push may pass the threshold.
        near_misses = sorted((t for t in tried if not t["success"] and t["coverage"] > 0.9), key=lambda t: t["key"])
        for miss in near_misses[: self.config.n_refine]:
            walk, touch, direction, length = miss["push"]
            for delta in self.config.refine_px:
                if length + delta > 0:
                    tried.append(self._replay(context, walk, touch, direction, length + delta))
        best = min(tried, key=lambda t: t["key"])
        return best["targets"], best["push_start"], list(best["poses"])

    def _walks_to_candidates(self, origin: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(the step out of the walking margin, if the walk starts inside it; the walk length to each fixed
        candidate's run-up start; how each walk goes, as self.walk.lengths says)."""
        tee, cands = self.tee, self.cands
        escape = tee.escape(origin, self.clearance) if tee.distance(origin) < self.clearance - 1e-6 else None
        walk_from = origin if escape is None else escape
        direct_ok = tee.segments_clear(
            np.repeat(walk_from[None], len(cands.start), axis=0), cands.start, self.clearance - 1.0
        )
        direct_len = np.linalg.norm(cands.start - walk_from, axis=1)
        walk_len, how = self.walk.lengths(
            self.walk.ends(walk_from[None], leaving=True), self._cand_ends, direct_len, direct_ok
        )
        return escape, walk_len + float(np.linalg.norm(walk_from - origin)), how

    def _candidates(self, origin: np.ndarray, walk_len: np.ndarray, how: np.ndarray) -> tuple[np.ndarray, ...]:
        """(touch, direction, start, run_up, walk_len, how) of the candidate pushes (block frame): the fixed layout,
        plus pushes that carry on from where the agent is if it touches the block."""
        cfg, cands = self.config, self.cands
        columns: tuple[np.ndarray, ...] = (cands.touch, cands.direction, cands.start, cands.run_up, walk_len, how)
        if self.tee.distance(origin) < self.radius + cfg.contact_px:
            normal = self.tee.outward_normal(origin)
            angles = np.radians(np.linspace(-cfg.carry_on_deg, cfg.carry_on_deg, cfg.carry_on_count))
            more = np.stack([rotate(-normal, float(a)) for a in angles])
            same, zeros = np.repeat(origin[None], len(more), axis=0), np.zeros(len(more))
            extra = (same, more, same, zeros, zeros, zeros.astype(int))
            columns = tuple(np.concatenate([column, rows]) for column, rows in zip(columns, extra, strict=True))
        return columns

    def _screen(self, pose, error_now, to_go_now, touch_w, dir_w, lead_in) -> tuple[np.ndarray, np.ndarray]:
        """Screening: push every feasible candidate (world frame) at constant speed from just before the touch.
        (push length per candidate and screened length, score per step saved: lower is better, inf if infeasible)."""
        cfg, sim = self.config, self.sim
        speed = cfg.max_step_px
        max_push = min(cfg.max_push_px, 2.0 * error_now + 40.0)
        step_px = speed * cfg.screen_dt / (sim.dt * sim.substeps)  # agent travel per screening substep
        n_sub = max(int(math.ceil((max_push + 1.0) / step_px)), 1)
        n = len(touch_w)
        screen = np.empty((n, n_sub, 3))
        for row in range(n):
            sim.load(touch_w[row] - dir_w[row], (0.0, 0.0), pose)
            screen[row] = sim.slide(dir_w[row] * (step_px / cfg.screen_dt), n_sub, cfg.screen_dt)
        push_len = np.arange(1, n_sub + 1) * step_px - 1.0  # (n_sub,) agent travel past the touch point
        ends = touch_w[:, None, :] + push_len[None, :, None] * dir_w[:, None, :]
        end_ok = np.all((ends > 2.0) & (ends < 510.0), axis=-1)
        to_go, done, cov = self._to_go(screen.reshape(-1, 3))
        to_go, done, cov = (x.reshape(n, n_sub) for x in (to_go, done, cov))
        exact_len = np.repeat(push_len[None], n, axis=0)
        self._refine_peaks(cov, done, to_go, exact_len, push_len, step_px)
        # steps: walk, run-up and push, plus about two steps of holding still after a push that does not succeed
        steps = (lead_in[:, None] + exact_len) / speed + np.where(done, 0.0, 2.0)
        return exact_len, np.where(end_ok, -(to_go_now - to_go) / steps, np.inf)

    def _refine_peaks(self, cov, done, to_go, exact_len, push_len, step_px) -> None:
        """The coverage peaks between screened lengths too: a parabola through the best three finds pushes that
        pass the threshold between them (the exact replay checks them). Marks them in done, to_go and exact_len."""
        n_sub = cov.shape[1]
        k = np.argmax(cov, axis=1)
        rows = np.flatnonzero((k > 0) & (k < n_sub - 1) & (cov.max(axis=1) > 0.8) & ~done.any(axis=1))
        if not len(rows):
            return
        c0, c1, c2 = cov[rows, k[rows] - 1], cov[rows, k[rows]], cov[rows, k[rows] + 1]
        curve = c0 - 2 * c1 + c2
        with np.errstate(divide="ignore", invalid="ignore"):
            offset = np.clip(np.where(curve < 0, (c0 - c2) / (2 * curve), 0.0), -0.5, 0.5)
        peak = c1 - (c0 - c2) * offset / 4
        hit = peak > self.success_threshold + 0.005
        done[rows[hit], k[rows[hit]]] = True
        exact_len[rows[hit], k[rows[hit]]] = push_len[k[rows[hit]]] + offset[hit] * step_px
        to_go[rows[hit], k[rows[hit]]] = 0.0

    def _best_rows(self, score: np.ndarray, exact_len: np.ndarray, error_now: float) -> list[tuple[int, float]]:
        """(candidate row, push length) of the best-scored few, best first: those the exact replay verifies."""
        cfg = self.config
        best_len = np.argmin(score, axis=1)
        best_score = score[np.arange(len(score)), best_len]
        n_verify = cfg.n_verify if error_now >= cfg.coverage_check_px else cfg.n_verify_near
        order = np.argsort(best_score, kind="stable")[:n_verify]
        return [(row, float(exact_len[row, best_len[row]])) for row in order if np.isfinite(best_score[row])]

    def _replay(self, context, walk, touch, direction, length) -> dict:
        """Replay one push exactly as it would be executed, from the env's true state; score it."""
        pose, agent_pos, (agent_vel, block_vel, block_spin), to_go_now = context
        cfg, tee, sim = self.config, self.tee, self.sim
        walk_w = to_world(walk, pose)
        path = np.concatenate([walk_w, to_world(np.array([touch, touch + length * direction]), pose)])
        # max_step_px - 1e-3: float32 rounding of the actions must not take a move past the limit
        targets, where = paced(
            path, cfg.max_step_px - 1e-3, cfg.turn_rate, cfg.accel_px, cfg.min_step_px, cfg.corner_step_px
        )
        walk_len = float(np.linalg.norm(np.diff(walk_w, axis=0), axis=1).sum())
        push_start = int(np.searchsorted(where, walk_len + 1e-9))
        sim.load(agent_pos, agent_vel, pose, block_vel, block_spin)
        executed, poses = sim.rollout(np.array(targets), cfg.settle_px, cfg.max_hold_steps)
        coverage = tee.coverage(poses, self.goal)
        hit = np.flatnonzero(coverage > self.success_threshold)
        if len(hit):
            executed, poses = executed[: hit[0] + 1], poses[: hit[0] + 1]
            gain = to_go_now
        else:
            gain = to_go_now - float(self._to_go(poses[-1:])[0][0])
        # A plan that would make the targets jitter is taken only if all the others would too.
        jitter = self._added_jitter(executed, push_start, final=len(hit) > 0) > 0
        return {
            "key": (jitter, -gain / len(executed)),
            "targets": list(executed),
            "poses": poses,
            "push_start": min(push_start, len(executed)),
            "success": len(hit) > 0,
            "coverage": float(coverage.max()),
            "push": (walk, touch, direction, length),
        }

    def _to_go(self, poses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cost-to-go (steps) of block poses (P, 3), whether they are successes, and their coverage (0 where it
        was not computed). Far from the goal it grows with the pose error; near it, with the coverage missing."""
        cfg = self.config
        error = self.tee.pose_error(poses, self.goal, cfg.px_per_rad)
        cov = np.zeros(len(poses))
        near = error < cfg.coverage_check_px
        if near.any():
            cov[near] = self.tee.coverage(poses[near], self.goal)
            blend = np.clip(2.0 * error[near] / cfg.coverage_check_px - 1.0, 0.0, 1.0)
            error[near] = blend * error[near] + (1.0 - blend) * (1.0 - cov[near]) * cfg.coverage_px
        done = cov > self.success_threshold
        to_go = np.where(done, 0.0, cfg.push_overhead_steps + cfg.steps_per_px * error)
        return to_go, done, cov

    def _walk_path(self, origin, escape, goal, how, pose) -> np.ndarray | None:
        """The walk's polyline (block frame) from the last target (via its escape point out of the walking margin,
        if any) to a run-up start, or None if it would leave the arena either way round the block."""
        walk_from = origin if escape is None else escape
        for direction in [how] if how == 0 else [how, -how]:
            path = self.walk.path(walk_from, goal, int(direction))
            if escape is not None:
                path = np.concatenate([origin[None], path])
            world = to_world(path, pose)
            if np.all((world > 1.0) & (world < 511.0)):
                return path
        return None

    def _added_jitter(self, targets: np.ndarray, push_start: int, final: bool, tail: int = 6) -> float:
        """The jitter (see target_motion_stats) that appending these targets (a plan whose push begins at
        push_start) would add to the last `tail` targets of the episode. Unless the plan is `final` (it succeeds),
        the next plan may well begin by backing away from the block: that counts as one more move."""
        first = max(len(self._executed) - tail, 0)
        start = self._executed[first - 1] if first > 0 else self.agent_start
        recent = np.array(self._executed[first:]).reshape(-1, 2)
        phases = [p - first for p in self.phase_starts if p >= first]
        before = target_motion_stats(recent, start, phases)["jitter"]
        n = len(recent)
        phases = phases + [n] + ([n + push_start] if 0 < push_start < len(targets) else [])
        combined = np.concatenate([start[None], recent, np.asarray(targets).reshape(-1, 2)])
        if not final:
            moves = np.diff(combined, axis=0)
            moving = np.flatnonzero(np.linalg.norm(moves, axis=1) >= 2.0)
            if len(moving):
                back = moves[moving[-1]] / np.linalg.norm(moves[moving[-1]])
                phases.append(len(combined) - 1)
                combined = np.concatenate([combined, combined[-1:] - 5.0 * back])
        combined = combined[1:]
        return target_motion_stats(combined, start, phases)["jitter"] - before


def target_motion_stats(
    actions: np.ndarray, start: np.ndarray, phase_starts: list[int] | None = None
) -> dict[str, float]:
    """How imitable a sequence of commanded targets is: `max_step_px`, the largest move of the target in a step (the
    first from `start`, the agent's position at reset); `reversals`, moves (of at least 2 px) that turn more than 120°
    from the previous one; `jitter`, reversals not at a phase change (`phase_starts`: the steps whose move begins a
    walk or a push; None counts every reversal) plus those within two moves of another. A clean demonstration has 0."""
    targets = np.concatenate([np.asarray(start, dtype=np.float64)[None], np.asarray(actions, dtype=np.float64)])
    moves = np.diff(targets, axis=0)
    lengths = np.linalg.norm(moves, axis=1)
    moving = np.flatnonzero(lengths >= 2.0)
    cos_limit = math.cos(math.radians(120.0))
    phase = np.zeros(len(moves) + 1, dtype=int)
    for t in phase_starts or []:
        if 0 <= t < len(phase):
            phase[t] = 1
    phase_count = np.cumsum(phase)
    reversals, jitter, last_reversal = 0, 0, -10
    for k in range(1, len(moving)):
        i, j = moving[k - 1], moving[k]
        if float(moves[i] @ moves[j]) >= cos_limit * lengths[i] * lengths[j]:
            continue
        reversals += 1
        # a phase that begins with move i (the turn lies inside it) up to move j counts
        at_phase_change = phase_starts is not None and phase_count[j] > (phase_count[i - 1] if i > 0 else 0)
        if not at_phase_change or k - last_reversal <= 2:
            jitter += 1
        last_reversal = k
    return {
        "max_step_px": float(lengths.max()) if len(lengths) else 0.0,
        "reversals": float(reversals),
        "jitter": float(jitter),
    }


def run_expert_episode(
    env: gym.Env, expert: PushTExpert, seed: int | None, max_steps: int = 300, **hooks
) -> PushTEpisode:
    """`run_episode` with the PushT expert (hooks as there), and the expert's record of the episode."""
    episode = run_episode(env, expert, seed, max_steps, **hooks)
    return PushTEpisode(
        **vars(episode),
        coverages=np.array([info.get("coverage", np.nan) for info in episode.infos]),
        planning_cpu_s=expert.planning_cpu_s,
        planning_wall_s=expert.planning_wall_s,
        n_plans=expert.n_plans,
        agent_start=expert.agent_start,
        phase_starts=list(expert.phase_starts),
    )
