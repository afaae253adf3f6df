"""The black-box suite: the real binary against a real PostgreSQL cluster
and the test upstream (tests/lib), one file per subject. The harness's
assertions are rewritten as the tests' own are, so a failing one shows its
operands."""
import pytest

pytest.register_assert_rewrite("tests.lib")
