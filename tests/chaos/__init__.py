"""The bounded chaos run: /usr/bin/python3 -m tests.chaos.chaos."""
