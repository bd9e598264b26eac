"""Where the repository is, for tests that run its examples and programs."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = REPO / "tests" / "programs"
EXAMPLES = REPO / "examples"
