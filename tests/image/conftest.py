"""Prints which runner the image tests used (podman or chroot)."""
import os


def pytest_terminal_summary(terminalreporter):
    used = os.environ.get("IDEMPROXY_IMAGE_RUNNER_USED")
    if used:
        terminalreporter.write_line("image runner: %s" % used)
