"""The proxy's listeners made inside another process's network namespace by an unprivileged
user, as bubblewrap's helper does under a daemon that is not root: it joins the namespace's
user namespace first (it owns it), makes the listeners there and hands them over; the host's
own namespace never has them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tools_base.sandbox import _netns

pytestmark = pytest.mark.timeout(60)

SCRIPT = """
import os, socket, subprocess, sys
sys.path.insert(0, sys.argv[1])
import _netns

sandbox = subprocess.Popen(
    ["unshare", "--user", "--net", "--map-user=1000", "sh", "-c", "echo ready; exec sleep 30"],
    stdout=subprocess.PIPE,
)
assert sandbox.stdout.readline() == b"ready\\n"
ours, theirs = socket.socketpair()
helper = os.fork()
if helper == 0:  # single-threaded, as the launcher's helper is
    try:
        _netns.enter_network_of(sandbox.pid)
        _netns.bring_up_loopback()
        _netns.send_listeners(theirs, _netns.make_listeners())
    except BaseException as exc:
        print("helper:", exc, flush=True)
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(helper, 0)
assert status == 0, status
message, fds, _, _ = socket.recv_fds(ours, 64, 2)
assert message == _netns.HANDOFF_TAG
names = sorted(socket.socket(fileno=fd).getsockname()[1] for fd in fds)
with socket.socket() as probe:
    here = probe.connect_ex(("127.0.0.1", _netns.HTTP_PORT))
sandbox.kill()
print(os.geteuid(), names, here)
"""


def test_an_unprivileged_helper_makes_the_listeners_in_a_sandboxs_namespace() -> None:
    if shutil.which("unshare") is None:
        pytest.fail("util-linux's unshare is needed (it is on every Debian machine)")
    # A directory the unprivileged user can read: the module (standard library only) and the
    # script, run by the system's python as that user.
    directory = Path(tempfile.mkdtemp(prefix="goondan-netns-test-"))
    try:
        directory.chmod(0o755)
        shutil.copy(_netns.__file__, directory / "_netns.py")
        (directory / "helper.py").write_text(SCRIPT)
        for path in directory.iterdir():
            path.chmod(0o644)
        command = [sys.executable, str(directory / "helper.py"), str(directory)]
        if os.geteuid() == 0:
            python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
            command = ["runuser", "-u", "nobody", "--", python, *command[1:]]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(directory)
    assert done.returncode == 0, done.stdout + done.stderr
    uid, *rest = done.stdout.split(maxsplit=1)
    assert uid != "0"  # really unprivileged
    ports = sorted(_netns.PORTS)
    # The listeners were made in the sandbox's namespace: this one has nothing on the port
    # (111: ECONNREFUSED).
    assert rest == [f"{ports} 111\n"]
