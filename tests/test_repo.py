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
