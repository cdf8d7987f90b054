"""MuJoCo's OpenGL backend for the MuJoCo envs (ALOHA, xArm): headless by default (`use_headless_gl()`, before mujoco
is imported), one line of advice when it fails."""

import importlib.util
import os
import sys


class RenderBackendError(RuntimeError):
    """MuJoCo has no working OpenGL backend, so camera frames cannot be rendered."""


# (backend, error) of a GL backend that could not be loaded, once rendering was disabled to run the physics
RENDER_FAILURE: list[tuple[str, str]] = []


def backend_advice(error: str) -> str:
    """One line: which backend failed and how, the backends to choose from, and the state-only way around it."""
    backend = os.environ.get("MUJOCO_GL", "egl")
    if RENDER_FAILURE:
        backend, error = RENDER_FAILURE[0]
    return (
        f"MuJoCo cannot render: MUJOCO_GL={backend} did not work ({error}). Headless machines render with "
        "MUJOCO_GL=egl (Mesa's EGL: apt install libegl1 libgl1-mesa-dri) or MUJOCO_GL=osmesa (software: apt install "
        "libosmesa6; slower); a desktop with a display can use MUJOCO_GL=glfw. Set it before starting. State-only "
        "observations need no rendering: --env.obs_type=environment_state_agent_pos, and no videos (--eval.n_videos=0)"
    )


def use_headless_gl() -> None:
    """MUJOCO_GL=egl unless set, and triton (when installed) loaded before the GL backend: Mesa's EGL/OSMesa drivers
    load their LLVM when a GL display opens, and triton's own LLVM (torch imports it for dynamo) loaded after that
    crashes the process."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    if "triton" not in sys.modules and importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401
