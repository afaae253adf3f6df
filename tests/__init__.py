"""idemproxy's tests. Their Python code is one package tree, imported from
the repository root: pytest finds the root through these __init__.py
files (tests/run.sh: `/usr/bin/python3 -m pytest tests/integration`), the
chaos and HA runs and the harness's programs start as modules
(`/usr/bin/python3 -m tests.chaos.chaos`). The shared harness is
tests/lib."""
