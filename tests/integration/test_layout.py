"""The module graph check (scripts/check-modules.sh): it passes on the
tree, and it fails, naming the circle, on modules that include each other
in a circle or on a function defined in two files."""
import os
import subprocess

from tests.lib.helpers import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "check-modules.sh")


def check(cwd):
    return subprocess.run(["sh", SCRIPT], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


def write(tree, path, text):
    full = tree / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


def test_the_tree_has_no_circle():
    r = check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no circle, no name defined twice" in r.stdout
    # The request module sits above the modules it sequences, the worker above it.
    layers = {}
    for line in r.stdout.splitlines():
        head, _, mods = line.strip().partition(":")
        if head.isdigit():
            for m in mods.split():
                layers[m] = int(head)
    assert layers["proxy/request"] > layers["proxy/store"] > layers["proxy/log"]
    assert layers["proxy/worker"] > layers["proxy/listener"] > layers["proxy/request"]
    assert layers["proxy/main"] == max(layers.values())


def test_a_circle_fails_and_is_named(tmp_path):
    write(tmp_path, "proxy/a.h", "#include \"proxy/b.h\"\n")
    write(tmp_path, "proxy/a.c", "#include \"proxy/a.h\"\nint a(void)\n{\n\treturn 0;\n}\n")
    write(tmp_path, "proxy/b.h", "int b(void);\n")
    write(tmp_path, "proxy/b.c", "#include \"proxy/c.h\"\nint b(void)\n{\n\treturn 0;\n}\n")
    write(tmp_path, "proxy/c.c", "#include \"proxy/a.h\"\n")
    write(tmp_path, "proxy/c.h", "\n")
    write(tmp_path, "conf/conf.h", "\n")
    r = check(tmp_path)
    assert r.returncode == 1
    assert "circle of 3 modules: proxy/a proxy/b proxy/c" in r.stdout
    assert "proxy/a -> proxy/b -> proxy/c -> proxy/a" in r.stdout


def test_a_name_defined_twice_fails(tmp_path):
    write(tmp_path, "proxy/a.c", "static void conn_free(int x)\n{\n}\n")
    write(tmp_path, "proxy/b.c", "static void conn_free(int x)\n{\n}\n")
    write(tmp_path, "conf/conf.c", "\n")
    r = check(tmp_path)
    assert r.returncode == 1
    assert "function conn_free is defined in proxy/a.c and proxy/b.c" in r.stdout


def test_a_folder_included_upwards_fails(tmp_path):
    """conf/ includes no proxy/ header; http/ none of proxy/ or conf/."""
    write(tmp_path, "proxy/a.h", "int a(void);\n")
    write(tmp_path, "conf/conf.c", "#include \"proxy/a.h\"\n")
    write(tmp_path, "http/path.c", "#include \"conf/conf.h\"\n")
    write(tmp_path, "conf/conf.h", "\n")
    r = check(tmp_path)
    assert r.returncode == 1
    assert "conf/conf includes proxy/a" in r.stdout
    assert "http/path includes conf/conf" in r.stdout
    write(tmp_path, "conf/conf.c", "#include \"http/path.h\"\n")
    write(tmp_path, "http/path.c", "\n")
    r = check(tmp_path)
    assert r.returncode == 0, r.stdout
