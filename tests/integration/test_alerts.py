"""The alert rules that ship (deploy/prometheus/alerts.yml): Prometheus's
own checker takes them, their unit tests (tests/prometheus/alerts_test.yml)
show each alert firing and not firing, every metric they name is in a real
scrape of a running idemproxy, whose text promtool also checks, and each
runbook names a section of docs/operations.md."""
import os
import re
import shutil
import subprocess

import pytest

from tests.lib import helpers
from tests.lib.admin import METRIC_NAME, admin, admin_proxy, metric_family

try:
    import yaml
except ImportError:  # reported by the test that needs it, not skipped
    yaml = None

RULES = os.path.join(helpers.ROOT, "deploy", "prometheus", "alerts.yml")
RULE_TESTS = os.path.join(helpers.ROOT, "tests", "prometheus", "alerts_test.yml")
OPERATIONS = os.path.join(helpers.ROOT, "docs", "operations.md")
PROMTOOL_TIMEOUT = 60
SEVERITIES = ("warning", "critical")
ANNOTATIONS = {"summary", "description", "runbook"}
# Every alert the rules must carry (the brief of what needs an operator).
ALERTS = {"IdemproxyRecordsNeedOperator", "IdemproxyNotReady", "IdemproxyStoreUnavailable",
          "IdemproxySweeperFailing", "IdemproxyStoreRetries", "IdemproxyReloadFailed",
          "IdemproxyDescriptorsNearLimit"}


def promtool(*args, stdin=None):
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: sh scripts/deps.sh test (Debian package prometheus)"
    return subprocess.run([tool] + list(args), input=stdin, capture_output=True,
                          timeout=PROMTOOL_TIMEOUT, cwd=helpers.ROOT)


def load(path):
    assert yaml, "python3-yaml is missing: sh scripts/deps.sh test"
    with open(path) as f:
        return yaml.safe_load(f)


def rules():
    return [r for g in load(RULES)["groups"] for r in g["rules"]]


def heading_anchors(path):
    """GitHub's anchors of a Markdown file's ATX headings (as
    scripts/check-docs.sh computes them, for the titles used here)."""
    anchors = set()
    with open(path) as f:
        for line in f:
            m = re.match(r"^#{1,6} (.*?)\s*$", line)
            if m:
                title = m.group(1).replace("`", "").lower()
                anchors.add(re.sub(r"[^a-z0-9_ -]", "", title).replace(" ", "-"))
    return anchors


def scrape_families(p):
    """The metric families of one scrape of p, from its TYPE lines."""
    r = admin(p, "GET", "/metrics")
    assert r.status == 200, r
    return r.body, set(re.findall(r"^# TYPE (\S+) ", r.body.decode(), re.M))


def test_rules_pass_promtool_check():
    r = promtool("check", "rules", RULES)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert b"SUCCESS: %d rules found" % len(ALERTS) in r.stdout, r.stdout


def test_rules_unit_tests_pass():
    """Each alert fires after its `for:` and not before, nor for the series
    beside it that must not trip it (alerts_test.yml says which)."""
    r = promtool("test", "rules", RULE_TESTS)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert b"SUCCESS" in r.stdout, r.stdout


def test_every_alert_has_for_severity_annotations_and_a_test():
    tested = {}
    for t in load(RULE_TESTS)["tests"]:
        for case in t["alert_rule_test"]:
            tested.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    anchors = heading_anchors(OPERATIONS)
    seen = set()
    for r in rules():
        name = r["alert"]
        seen.add(name)
        assert re.fullmatch(r"[0-9]+[smh]", str(r.get("for", ""))), name
        assert r["labels"]["severity"] in SEVERITIES, name
        assert set(r["annotations"]) == ANNOTATIONS, name
        path, _, anchor = r["annotations"]["runbook"].partition("#")
        assert path == "docs/operations.md" and anchor in anchors, (name, anchor)
        # Fired in one case, silent in another.
        assert tested.get(name) == {True, False}, (name, tested.get(name))
    assert seen == ALERTS, seen ^ ALERTS


def test_alerts_name_only_metrics_a_real_scrape_has(proxy):
    """Every metric an alert expression names is a family a running
    idemproxy exports, and the scrape passes promtool's own check."""
    p = admin_proxy(proxy)
    body, families = scrape_families(p)
    check = promtool("check", "metrics", stdin=body)
    assert check.returncode == 0, (check.stdout, check.stderr)
    used = {metric_family(m) for r in rules() for m in METRIC_NAME.findall(r["expr"])}
    assert used, rules()
    missing = used - families
    assert not missing, "alerts name metrics /metrics lacks: %s" % sorted(missing)

