"""The node packages tests/sdk/package-lock.json pins, installed by `npm ci`
into tests/sdk/node_modules once per session, and run from there
(test_sdk.py's SDKs, test_contract.py's OpenAPI linter and TypeScript
compiler). A test that needs them is skipped, saying so, only when the npm
registry cannot be reached."""
import json
import os
import shutil
import subprocess

import pytest

from tests.lib.helpers import ROOT

SDK_DIR = os.path.join(ROOT, "tests", "sdk")
NPM_TIMEOUT = 240        # npm ci, whole
NPM_PING_TIMEOUT = 30
NPM_ENV = {
    "npm_config_update_notifier": "false",
    "npm_config_fund": "false",
    "npm_config_audit": "false",
    "npm_config_fetch_retries": "1",
    "npm_config_fetch_retry_mintimeout": "2000",
    "npm_config_fetch_retry_maxtimeout": "5000",
    "npm_config_fetch_timeout": "20000",
}


def text(out):
    """A TimeoutExpired's output, which may be bytes whatever text= said."""
    if isinstance(out, bytes):
        return out.decode("utf-8", "replace")
    return out or ""


def pinned():
    with open(os.path.join(SDK_DIR, "package.json")) as f:
        return json.load(f)["dependencies"]


def npm(npm_bin, *args, timeout):
    """(exit code, output) of `npm ARGS...` in tests/sdk; code None when it
    did not finish in time."""
    env = dict(os.environ, **NPM_ENV)
    try:
        r = subprocess.run([npm_bin] + list(args), cwd=SDK_DIR, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, "npm %s did not finish in %d s %s" % (" ".join(args), timeout,
                                                           text(e.stderr))
    return r.returncode, r.stdout + r.stderr


def npm_reason(output):
    """The line of npm's output that says why it failed."""
    lines = [l.replace("npm error", "").replace("npm ERR!", "").strip()
             for l in output.splitlines()]
    for mark in ("request to ", "reason:", "did not finish", "code E"):
        for line in lines:
            if mark in line:
                return line
    return next((l for l in reversed(lines) if l), "no answer")


def skip_unless_registry(npm_bin):
    code, out = npm(npm_bin, "ping", timeout=NPM_PING_TIMEOUT)
    if code != 0:
        pytest.skip("npm registry unreachable: %s" % npm_reason(out))


def install():
    """node, with the packages installed by `npm ci` from the lock file."""
    node_bin, npm_bin = shutil.which("node"), shutil.which("npm")
    assert node_bin and npm_bin, ("node and npm are not installed: scripts/deps.sh test "
                                  "installs Debian's nodejs and npm")
    skip_unless_registry(npm_bin)
    code, out = npm(npm_bin, "ci", "--ignore-scripts", "--no-audit", "--no-fund",
                    timeout=NPM_TIMEOUT)
    if code != 0:
        skip_unless_registry(npm_bin)  # lost on the way
        pytest.fail("npm ci failed in %s although the registry answers:\n%s" % (SDK_DIR, out))
    return node_bin


def npx(*args, timeout, cwd=None):
    """(exit code, stdout, stderr) of a command installed in
    tests/sdk/node_modules/.bin (`npx --prefix tests/sdk ARGS...`, offline);
    code None when it did not finish in time."""
    env = dict(os.environ, **NPM_ENV, npm_config_offline="true")
    cmd = [shutil.which("npx"), "--prefix", SDK_DIR] + list(args)
    try:
        r = subprocess.run(cmd, cwd=cwd or SDK_DIR, env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, text(e.stdout), "%s did not finish in %d s %s" % (
            " ".join(args), timeout, text(e.stderr))
    return r.returncode, r.stdout, r.stderr
