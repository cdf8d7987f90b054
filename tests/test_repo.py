"""The repository's own promises: README's test command is exactly what CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)


def test_ci_runs_the_readme_test_command():
    test_command = next(cmd for cmd in readme_commands() if "pytest" in cmd)
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command.strip() in ci_lines


def test_ci_installs_with_the_readme_setup_command():
    setup_command = readme_commands()[0]
    assert 'pip install -e ".[dev]"' in setup_command
    assert 'pip install -e ".[dev]"' in (ROOT / ".ci" / "run").read_text()


def test_readme_python_tour_runs(tmp_path, monkeypatch):
    """The tour records its own data, so it runs offline, and runs again in the same folder; it writes under ./tour
    (here a temp dir)."""
    tour = re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    assert len(tour) == 1
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # re-runnable: the second run replaces the first one's recording and policy
        exec(compile(tour[0], "README.md", "exec"), {"__name__": "readme_tour"})
    assert (tmp_path / "tour" / "policy" / "model.safetensors").is_file()


def test_readme_commands_name_real_files_and_flags():
    text = (ROOT / "README.md").read_text()
    assert "accelerate launch examples/train_pusht.py" in text and (ROOT / "examples" / "train_pusht.py").is_file()
    for script in re.findall(r"bench/\w+\.py", text):
        assert (ROOT / script).is_file(), script
