"""The OCI image `make image` writes (build/image/idemproxy-VERSION.oci.tar,
or IDEMPROXY_IMAGE), tested from the archive itself: its layers are
unpacked for the checks on its files, and its idemproxy runs against a
real PostgreSQL (on 127.0.0.1) and the test upstream. The runner is podman
(`podman run --network=host` with runc, the archive loaded first) where
podman can run a container on this machine, otherwise chroot(8) into the
unpacked files as uid 65532; IDEMPROXY_IMAGE_RUNNER=podman|chroot forces
one. The runner in use is printed after the tests."""
import json
import os
import resource
import shutil
import subprocess
import tarfile
import uuid

import pytest

from tests.lib import http1, procs
from tests.lib.cluster import Cluster
from tests.lib.upstream import Upstream

with open(os.path.join(procs.ROOT, "VERSION")) as f:
    VERSION = f.read().strip()
ARCHIVE = os.environ.get("IDEMPROXY_IMAGE") or os.path.join(
    procs.ROOT, "build", "image", "idemproxy-%s.oci.tar" % VERSION)
TAG = "localhost/idemproxy:" + VERSION
UID = 65532
CONF = "/etc/idemproxy/idemproxy.conf"
CMD_TIMEOUT = 60
# The libraries idemproxy links against, by package.
LIBRARY_PACKAGES = {"libc6", "libevent-2.1-7", "libevent-core-2.1-7", "libevent-openssl-2.1-7",
                    "libevent-pthreads-2.1-7", "libpq5", "libssl3", "libyajl2",
                    "libnghttp2-14"}


class TcpCluster(Cluster):
    """The session's cluster, also on 127.0.0.1 (the image's user cannot
    reach the socket directory, which is postgres's own)."""

    listen_addresses = "127.0.0.1"


def unpack(archive, into):
    """The image in the OCI archive: (its config, the directory its layers
    were unpacked into)."""
    layout = os.path.join(into, "layout")
    with tarfile.open(archive) as t:
        t.extractall(layout)

    def blob(digest):
        return os.path.join(layout, "blobs", *digest.split(":", 1))

    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    assert len(index["manifests"]) == 1, index
    ref = index["manifests"][0]
    assert ref["annotations"]["org.opencontainers.image.ref.name"] == "idemproxy:" + VERSION
    with open(blob(ref["digest"])) as f:
        manifest = json.load(f)
    with open(blob(manifest["config"]["digest"])) as f:
        config = json.load(f)
    rootfs = os.path.join(into, "rootfs")
    os.mkdir(rootfs)
    for layer in manifest["layers"]:
        r = subprocess.run(["tar", "-xf", blob(layer["digest"]), "-C", rootfs,
                            "--numeric-owner"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return config, rootfs


class Podman:
    """Runs the image with podman: host network, the host's descriptor
    limit, runc (crun refuses this machine's hybrid cgroups)."""

    name = "podman"

    def __init__(self, tmp):
        self.tmp = tmp
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.base = ["podman", "run", "--rm", "--runtime", "runc", "--network=host",
                     "--ulimit", "nofile=%d:%d" % (hard, hard),
                     "--ulimit", "nproc=4096:4096"]

    def load(self):
        subprocess.run(["podman", "rmi", "-f", TAG], capture_output=True, timeout=CMD_TIMEOUT)
        r = subprocess.run(["podman", "load", "-q", "-i", ARCHIVE], capture_output=True,
                           text=True, timeout=CMD_TIMEOUT)
        return r.returncode == 0

    def argv(self, args, conf=None, name=None, entrypoint=None):
        a = list(self.base)
        if name:
            a += ["--name", name]
        if conf:
            a += ["-v", "%s:%s:ro" % (conf, CONF)]
        if entrypoint:
            a += ["--entrypoint", entrypoint]
        return a + [TAG] + list(args)

    def run(self, args, conf=None, entrypoint=None):
        return subprocess.run(self.argv(args, conf, entrypoint=entrypoint),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=CMD_TIMEOUT)

    def start(self, args, conf, log):
        name = "idemproxy-test-" + uuid.uuid4().hex[:8]
        proc = subprocess.Popen(self.argv(args, conf, name), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log)
        proc.container = name
        return proc

    def pid(self, proc):
        r = subprocess.run(["podman", "inspect", "-f", "{{.State.Pid}}", proc.container],
                           capture_output=True, text=True, timeout=CMD_TIMEOUT)
        return int(r.stdout.strip() or 0) if r.returncode == 0 else 0

    def stop(self, proc):
        subprocess.run(["podman", "stop", "-t", "30", proc.container], capture_output=True,
                       timeout=CMD_TIMEOUT)
        return proc.wait(CMD_TIMEOUT)


class Chroot:
    """Runs the unpacked files with chroot(8) as uid 65532, with what a
    container runtime would add: /dev/null, /dev/urandom, /etc/resolv.conf."""

    name = "chroot"

    def __init__(self, rootfs):
        self.root = rootfs
        for dev, major, minor in (("null", 1, 3), ("zero", 1, 5), ("urandom", 1, 9)):
            path = os.path.join(rootfs, "dev", dev)
            if not os.path.exists(path):
                os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))
                os.chmod(path, 0o666)
        if os.path.exists("/etc/resolv.conf"):
            shutil.copy("/etc/resolv.conf", os.path.join(rootfs, "etc", "resolv.conf"))

    def argv(self, args, conf=None, entrypoint=None):
        if conf:
            shutil.copy(conf, os.path.join(self.root, CONF.lstrip("/")))
        return [shutil.which("chroot") or "/usr/sbin/chroot", "--userspec=%d:%d" % (UID, UID), self.root,
                entrypoint or "/usr/bin/idemproxy"] + list(args)

    def run(self, args, conf=None, entrypoint=None):
        return subprocess.run(self.argv(args, conf, entrypoint), env={"PATH": "/usr/bin"},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=CMD_TIMEOUT)

    def start(self, args, conf, log):
        return subprocess.Popen(self.argv(args, conf), env={"PATH": "/usr/bin"},
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def pid(self, proc):
        return proc.pid

    def stop(self, proc):
        proc.terminate()
        return proc.wait(CMD_TIMEOUT)


def podman_works(runner):
    """Whether podman loads the archive and runs a container of it here:
    125 and 126 are podman's and the runtime's failures; anything else
    (127 included: the dynamic loader's when a library is missing) comes
    from the image's own files."""
    if shutil.which("podman") is None or shutil.which("runc") is None:
        return False
    if not runner.load():
        return False
    try:
        return runner.run(["--version"]).returncode not in (125, 126)
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(scope="session")
def image(tmp_path_factory):
    """(config, rootfs, runner) of the archive's image."""
    assert os.path.exists(ARCHIVE), "%s is missing (make image)" % ARCHIVE
    tmp = tmp_path_factory.mktemp("image")
    config, rootfs = unpack(ARCHIVE, str(tmp))
    want = os.environ.get("IDEMPROXY_IMAGE_RUNNER", "")
    runner = None
    if want in ("", "podman"):
        podman = Podman(str(tmp))
        if podman_works(podman) or want == "podman":
            runner = podman
    if runner is None:
        runner = Chroot(rootfs)
    os.environ["IDEMPROXY_IMAGE_RUNNER_USED"] = runner.name
    return config, rootfs, runner


@pytest.fixture(scope="session")
def pg():
    cluster = TcpCluster()
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def upstream():
    up = Upstream()
    yield up
    up.stop()


def shipped_conf(rootfs):
    with open(os.path.join(rootfs, CONF.lstrip("/"))) as f:
        return f.read()


def test_config_user_entrypoint_and_command(image):
    config, rootfs, _ = image
    c = config["config"]
    assert c["User"] == "%d:%d" % (UID, UID)
    assert c["Entrypoint"] == ["/usr/bin/idemproxy"]
    assert c["Cmd"] == ["-c", CONF]
    assert c["Labels"]["org.opencontainers.image.version"] == VERSION
    with open(os.path.join(rootfs, "etc", "passwd")) as f:
        users = {line.split(":")[0]: line.strip().split(":") for line in f}
    assert users["idemproxy"][2:4] == [str(UID), str(UID)]


def test_files_are_the_runtime_only(image):
    """No shell, no package manager; the package database names the
    libraries idemproxy links against."""
    _, rootfs, runner = image
    names = set()
    for _, _, files in os.walk(rootfs):
        names.update(files)
    for tool in ("sh", "bash", "dash", "busybox", "apt", "apt-get", "dpkg", "perl", "python3"):
        assert tool not in names, tool
    r = runner.run(["-c", "true"], entrypoint="/bin/sh")
    assert r.returncode != 0
    with open(os.path.join(rootfs, "var", "lib", "dpkg", "status")) as f:
        packages = {line.split()[1] for line in f if line.startswith("Package: ")}
    assert LIBRARY_PACKAGES <= packages, LIBRARY_PACKAGES - packages
    assert os.stat(os.path.join(rootfs, "usr", "bin", "idemproxy")).st_uid == 0


def test_version(image):
    r = image[2].run(["--version"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "idemproxy " + VERSION


def test_shipped_configuration_checks(image):
    r = image[2].run(["-t", "-c", CONF])
    assert r.returncode == 0, r.stdout + r.stderr


def test_migrate_owner_replay_conflict_as_non_root(image, pg, upstream, tmp_path):
    _, rootfs, runner = image
    port, admin = procs.free_port(), procs.free_port()
    lines = []
    for line in shipped_conf(rootfs).splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("listen", "upstream", "admin", "database"):
            continue
        lines.append(line)
    conf = tmp_path / "idemproxy.conf"
    conf.write_text("listen 127.0.0.1:%d\nupstream %s\nadmin 127.0.0.1:%d\n"
                    "database \"host=127.0.0.1 port=%d dbname=idemproxy user=postgres\"\n%s\n"
                    % (port, upstream.url, admin, pg.port, "\n".join(lines)))
    conf.chmod(0o644)

    r = runner.run(["migrate", "-c", CONF], conf=str(conf))
    assert r.returncode == 0, r.stdout + r.stderr

    log_path = tmp_path / "idemproxy.log"
    with open(log_path, "w") as log:
        proc = runner.start(["-c", CONF], str(conf), log)
    try:
        def ready():
            assert proc.poll() is None, log_path.read_text()
            try:
                return http1.request(admin, "GET", "/readyz", [("Host", "127.0.0.1:%d" % admin)],
                                     timeout=2).status == 200
            except OSError:
                return False
        assert procs.poll(ready, limit=30), log_path.read_text()

        pid = runner.pid(proc)
        with open("/proc/%d/status" % pid) as f:
            status = dict(line.split(":", 1) for line in f)
        assert status["Uid"].split() == [str(UID)] * 4, status["Uid"]
        assert status["Gid"].split() == [str(UID)] * 4, status["Gid"]

        upstream.reset()
        key, actor = "img-" + uuid.uuid4().hex, "actor-" + uuid.uuid4().hex[:8]
        body = json.dumps({"title": "Image", "topic": "ops", "lessons": 3}).encode()

        def post(b):
            return http1.request(port, "POST", "/api/courses", [
                ("Idempotency-Key", key), ("X-Actor-Id", actor),
                ("Content-Type", "application/json")], b)

        owner = post(body)
        assert owner.status == 201, owner
        assert owner.headers.get("Idempotent-Replayed") is None
        replay = post(body)
        assert replay.status == 201 and replay.body == owner.body, replay
        assert replay.headers.get("Idempotent-Replayed") == "true"
        other = json.dumps({"title": "Other", "topic": "ops", "lessons": 3}).encode()
        conflict = post(other)
        assert conflict.status == 422, conflict
        assert b"idempotency-conflict" in conflict.body
        assert upstream.count(key=key) == 1
    finally:
        rc = runner.stop(proc)
    assert rc == 0, log_path.read_text()
