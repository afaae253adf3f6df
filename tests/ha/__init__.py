"""The high-availability stage: /usr/bin/python3 -m tests.ha.ha."""
