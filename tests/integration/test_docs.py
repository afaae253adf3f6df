"""The documents check (scripts/check-docs.sh, run by `make lint`): it passes
on the tree, and it fails, naming the document and line, on a link to a
file that does not exist, on a link to a heading that does not exist and
on a table that copies the directive reference."""
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = ("check-docs.sh", "check-conf-doc.sh")
TIMEOUT = 60


def check(cwd):
    return subprocess.run(["sh", os.path.join("scripts", "check-docs.sh")], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TIMEOUT)


def failures(cwd):
    """The check's complaints about a tree it must refuse, one a line."""
    r = check(cwd)
    assert r.returncode == 1, r.stdout + r.stderr
    return r.stderr.strip().splitlines()


def tree(tmp_path, readme, docs=None):
    """A repository of the directive table, the checks, README.md and docs/."""
    (tmp_path / "conf").mkdir()
    shutil.copy(os.path.join(ROOT, "conf", "conf.c"), tmp_path / "conf" / "conf.c")
    (tmp_path / "scripts").mkdir()
    for name in SCRIPTS:
        shutil.copy(os.path.join(ROOT, "scripts", name), tmp_path / "scripts" / name)
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs").mkdir()
    for path, text in (docs or {}).items():
        full = tmp_path / "docs" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return tmp_path


GUIDE = """# Guide

## Where `key_from` fits: keys, (mostly)

## Where `key_from` fits: keys, (mostly)

A [file](../README.md), [a heading](#guide), [the second](#where-key_from-fits-keys-mostly-1),
[a directory](bench/), [from the root](/docs/guide.md#guide) and
[the web](https://example.com/missing.md#nowhere).

```
[in a code block](missing.md#nowhere)
```

Inline code is not a link: `[x](missing.md)`.
"""


def test_the_tree_passes():
    r = check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no directive table" in r.stdout
    assert r.stderr == ""


def test_links_that_resolve_pass(tmp_path):
    t = tree(tmp_path, "# idemproxy\n\n[guide](docs/guide.md#guide)\n",
             {"guide.md": GUIDE, "bench/data.csv": "a,b\n"})
    r = check(t)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 documents, 6 links to repository files (4 to headings)" in r.stdout


def test_a_missing_file_fails_and_is_named(tmp_path):
    t = tree(tmp_path, "# idemproxy\n\nSee\n[the store](docs/store.md) and ![a chart](docs/bench/bench.png).\n"
             "\n[ref]: docs/gone.md\n")
    assert failures(t) == [
        "check-docs: README.md:4: link to a file that does not exist: docs/store.md",
        "check-docs: README.md:4: link to a file that does not exist: docs/bench/bench.png",
        "check-docs: README.md:6: link to a file that does not exist: docs/gone.md",
    ]


def test_a_link_out_of_the_repository_fails(tmp_path):
    t = tree(tmp_path, "# idemproxy\n", {"a.md": "# A\n\n[up](../../etc/passwd)\n"})
    assert failures(t) == [
        "check-docs: docs/a.md:3: link to ../../etc/passwd leaves the repository"]


def test_a_missing_heading_fails_and_is_named(tmp_path):
    t = tree(tmp_path, "# idemproxy\n\n[tls](docs/guide.md#tls) [here](#idemproxy) [there](#top)\n",
             {"guide.md": GUIDE, "bench/data.csv": "a,b\n"})
    assert failures(t) == [
        "check-docs: README.md:3: link to docs/guide.md#tls: docs/guide.md has no heading #tls",
        "check-docs: README.md:3: link to #top: README.md has no heading #top",
    ]


def test_a_table_of_directives_fails(tmp_path):
    table = ("| directive | default |\n|---|---|\n| `listen ADDR:PORT` | 127.0.0.1:8080 |\n"
             "| `upstream URL` | (required) |\n| `retention DUR` | 24h |\n")
    t = tree(tmp_path, "# idemproxy\n\n" + table)
    assert failures(t) == [
        "check-docs: README.md:3: a table of 3 directives: directives are listed in"
        " docs/man/idemproxy.conf.5 only"]
    # A table about something else may name a directive or two.
    (tmp_path / "other").mkdir()
    t2 = tree(tmp_path / "other", "# idemproxy\n\n" + table.replace("| `retention DUR`", "| retention"))
    r = check(t2)
    assert r.returncode == 0, r.stderr
