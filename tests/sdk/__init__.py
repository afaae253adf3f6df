"""Real SDK clients (Node scripts) and the upstream they talk to,
tests/sdk/upstream.py (/usr/bin/python3 -m tests.sdk.upstream)."""
