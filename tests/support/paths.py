"""The folders the tests read from, wherever a test module sits under tests/."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
SUPPORT = TESTS / "support"
