"""The sandbox that runs model-written programs: each hostile program is contained, with a reason graftbench
observed, graftbench's process is unharmed, a program sees only the program environment, and where the sandbox cannot
be built nothing runs. No model.

Every containment test needs the full sandbox (bubblewrap, root, the cgroup v1 hierarchies, libseccomp, the program
environment built). On a machine that lacks one, each is a named skip (``tests.prereqs.need``), or a failure where
``GRAFTBENCH_REQUIRE`` names the sandbox (``.ci/run``); the refusal itself (one line naming what is missing, nothing
started) is checked everywhere by making the probe fail
(:func:`test_without_a_facility_no_program_runs_and_the_refusal_names_it`).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from graftbench.programs import bwrap, cgroup, environment, sandbox
from graftbench.eval.evaluate import program_fields
from graftbench.programs.mode import program_verdict
from graftbench.settings import SandboxLimits
from tests.conftest import AIME2024
from tests.prereqs import need
from tests.programs import opened

LIMITS = SandboxLimits(cpu_s=2, wall_s=6.0, processes=16)
SANDBOX, WHY = opened()  # the sandbox and "" where it is built here, else None and what is missing
ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def run(source: str, limits: SandboxLimits = LIMITS, **kwargs) -> sandbox.ProgramResult:
    return SANDBOX.run(textwrap.dedent(source), limits, **kwargs)


def sandbox_user_processes(owner: int | None = None) -> list[int]:
    """Live (not zombie) processes of the sandbox's user in a run cgroup of graftbench process ``owner`` (this
    process by default), wherever they are on the machine: a program cannot leave its run's cgroup, and a run whose
    processes outlive it keeps its cgroup, so nothing left behind is missed, while a concurrent graftbench's programs
    (another test session's, a replay's) are not counted."""
    uid = bwrap.ids()[0]
    marker = f"/{cgroup.GROUP}/run-{owner or os.getpid()}-"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
            groups = Path(f"/proc/{name}/cgroup").read_text()
        except OSError:
            continue
        uids = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
        state = re.search(r"^State:\s+(\w)", status, re.MULTILINE)
        if uids and int(uids.group(1)) == uid and state and state.group(1) != "Z" and marker in groups:
            found.append(int(name))
    return found


def wait_until_gone(owner: int | None = None, wait_s: float = 2.0) -> list[int]:
    """The processes of ``owner``'s runs still there after up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while sandbox_user_processes(owner) and time.monotonic() < deadline:
        time.sleep(0.05)
    return sandbox_user_processes(owner)


@pytest.fixture(autouse=True)
def no_leftovers():
    """Every test starts and ends with no process of the sandbox's user from this process's runs (a fork bomb
    left nothing behind)."""
    assert sandbox_user_processes() == []
    yield
    assert wait_until_gone() == []


def test_a_program_prints_its_answer_and_imports_sympy():
    need("sandbox", WHY)
    result = run("""
        import sympy
        print(sympy.factorint(360))
        print(int(sympy.binomial(10, 3)))
    """)
    assert (result.stopped, result.exit_status, result.answer) == (None, 0, "120")
    assert result.stdout == "{2: 3, 3: 2, 5: 1}\n120\n"
    assert result.stdout_sha256 == hashlib.sha256(b"{2: 3, 3: 2, 5: 1}\n120\n").hexdigest()
    assert result.run_s > 0 and result.isolation == SANDBOX.isolation.description


def test_the_last_printed_line_is_the_answer():
    need("sandbox", WHY)
    result = run("print(12)\nprint(13)\nprint('   ')\n")
    assert result.answer == "13"
    assert program_verdict(result.stdout, result.stopped, "13").correct
    assert not program_verdict(result.stdout, result.stopped, "12").correct


@pytest.mark.parametrize("stdout, judged", [("17\x1c42\n", "42"), ("17\r42", "42"), ("17\u202842\n\n", "42"),
                                            ("1\n  x = 42 \t\n \n", "x = 42")])
def test_the_view_marks_the_line_the_verifier_judged(stdout, judged):
    """Lines end where ``str.splitlines`` ends them (``\\r``, ``\\x1c``, U+2028 too), for the verifier and for the
    view alike: the page once cut stdout at ``\\n`` only and marked ``17\\x1c42`` as "the line the verifier
    judged" while ``42`` was judged. Now graftbench cuts it (``stdout_parts``) and the page marks that cut."""
    from graftbench.report.view import _view_sample

    parts = sandbox.answer_line_parts(stdout)
    assert parts is not None and "".join(parts) == stdout and parts[1] == judged == sandbox.answer_line(stdout)
    verdict = program_verdict(stdout, None, "42")
    sample = {"problem_id": "p", "program": "print(42)\n", "stdout": stdout, "stopped": None, "exit_status": 0,
              "key": "42", "extracted": verdict.extracted, "correct": verdict.correct}
    shown = _view_sample(sample, 4, None)
    assert shown["stdout_parts"] == list(parts)
    assert _view_sample({**sample, "extracted": None}, 4, None)["stdout_parts"] is None  # no answer: nothing marked
    assert sandbox.answer_line_parts(" \n\r\x1c") is None


def test_a_program_that_prints_nothing_has_no_answer_and_is_incorrect():
    need("sandbox", WHY)
    result = run("x = 6 * 7\n")
    assert (result.stopped, result.exit_status, result.stdout, result.answer) == (None, 0, "", None)
    verdict = program_verdict(result.stdout, result.stopped, "42")
    assert (verdict.extracted, verdict.correct) == (None, False)


def test_a_syntax_error_crashed():
    need("sandbox", WHY)
    result = run("def f(:\n    print(1)\n")
    assert (result.stopped, result.exit_status, result.answer) == ("crashed", 1, None)
    assert "SyntaxError" in result.stderr_tail


def test_a_program_that_prints_its_answer_then_fails_has_no_answer():
    need("sandbox", WHY)
    result = run("import sys\nprint(42)\nsys.exit(3)\n")
    assert (result.stopped, result.exit_status, result.stdout, result.answer) == ("crashed", 3, "42\n", None)
    assert not program_verdict(result.stdout, result.stopped, "42").correct


def test_an_infinite_loop_is_stopped_for_time():
    need("sandbox", WHY)
    limits = SandboxLimits(cpu_s=1, wall_s=3.0)
    started = time.monotonic()
    result = run("while True:\n    pass\n", limits)
    assert (result.stopped, result.answer) == ("timeout", None)
    assert time.monotonic() - started < limits.wall_s + 6


def test_a_sleeping_program_is_stopped_at_the_wall_time():
    need("sandbox", WHY)
    result = run("import time\nprint('started', flush=True)\ntime.sleep(600)\n", SandboxLimits(wall_s=2.0))
    assert (result.stopped, result.exit_status, result.stdout) == ("timeout", -9, "started\n")
    assert 2.0 <= result.run_s < 8


def test_a_program_that_closes_its_output_and_sleeps_is_stopped_at_the_wall_time():
    need("sandbox", WHY)
    result = run("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(600)\n", SandboxLimits(wall_s=2.0))
    assert (result.stopped, result.exit_status) == ("timeout", -9)


def test_allocating_20_gb_is_stopped_for_memory():
    need("sandbox", WHY)
    result = run("x = [bytearray(64 << 20) for _ in range(320)]\nprint('allocated')\n",
                 SandboxLimits(cpu_s=20, wall_s=30.0))
    assert (result.stopped, result.stdout, result.answer) == ("memory", "", None)
    assert result.exit_status == 128 + signal.SIGKILL  # the kernel's out-of-memory killer, at the run's cap


def test_printing_1_gb_is_cut_at_the_output_limit():
    need("sandbox", WHY)
    limits = SandboxLimits(output_bytes=4096)
    result = run("import sys\nline = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(line)\n", limits)
    assert (result.stopped, result.exit_status, result.answer) == ("output", -9, None)
    assert result.stdout == "x" * 4096


def test_flooding_stderr_is_cut_at_the_output_limit():
    need("sandbox", WHY)
    result = run("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n", SandboxLimits(output_bytes=4096))
    assert result.stopped == "output"
    assert len(result.stderr_tail) == sandbox.STDERR_TAIL_CHARS and set(result.stderr_tail) == {"e"}


def test_a_fork_bomb_is_refused_and_leaves_no_process():
    need("sandbox", WHY)
    result = run("import os\nwhile True:\n    os.fork()\n")
    assert result.stopped == "forbidden"
    assert "BlockingIOError" in result.stderr_tail or "Resource temporarily unavailable" in result.stderr_tail


def test_processes_are_capped_and_die_with_the_program():
    need("sandbox", WHY)
    result = run("""
        import os, time
        children = 0
        while True:
            try:
                pid = os.fork()
            except OSError as exc:
                print("refused after", children, exc.errno, flush=True)
                time.sleep(600)
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            children += 1
    """, SandboxLimits(wall_s=4.0, processes=16))
    assert result.stopped == "timeout"
    refused = re.fullmatch(r"refused after (\d+) 11\n", result.stdout)
    assert refused and 1 <= int(refused.group(1)) <= 15  # the program itself is one of the 16


def test_a_daemonized_child_dies_with_the_program():
    need("sandbox", WHY)
    result = run("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        print(7)
    """)
    assert (result.stopped, result.answer) == (None, "7")  # the fixture checks that the sleeper is gone


def test_writing_outside_its_folder_is_refused_and_nothing_is_written(tmp_path):
    need("sandbox", WHY)
    store, runs = tmp_path / "store", tmp_path / "runs"
    store.mkdir()
    runs.mkdir()
    host_tmp = Path("/tmp") / f"graftbench-escape-{os.getpid()}"
    targets = [host_tmp, store / "planted", runs / "planted", Path(sys.prefix) / "planted", Path("/etc/planted"),
               Path("/planted"), Path("/usr/planted")]
    result = run(f"""
        import errno, os
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as handle:
                    handle.write("x")
                print("wrote", path)
            except OSError as exc:
                print("refused", errno.errorcode[exc.errno])
        with open("mine.txt", "w") as handle:
            handle.write("inside")
        with open("/tmp/scratch", "w") as handle:
            handle.write("private")
        print(open("mine.txt").read(), open("/tmp/scratch").read())
    """)
    lines = result.stdout.splitlines()
    assert result.stopped is None and lines[-1] == "inside private"
    assert lines[0] == f"wrote {host_tmp}"  # into the sandbox's own /tmp, a tmpfs that dies with it...
    assert not host_tmp.exists()  # ...never the host's
    assert lines[1:4] == ["refused ENOENT"] * 3  # the store, run folders and graftbench's venv are not visible
    assert [line.split()[0] for line in lines[4:-1]] == ["refused"] * 3
    assert set(lines[4:-1]) <= {"refused EROFS", "refused EACCES"}
    assert not any(t.exists() for t in targets)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "store"]


def test_an_uncaught_write_to_a_read_only_folder_crashes_the_program():
    need("sandbox", WHY)
    env = SANDBOX.environment
    result = run(f"open({env.prefix + '/planted'!r}, 'w').write('x')\n")  # the program environment, bound read-only
    assert (result.stopped, result.exit_status) == ("crashed", 1)
    assert "Read-only file system" in result.stderr_tail
    assert not (env.path / "prefix" / "planted").exists() and not Path(env.prefix, "planted").exists()


def test_deleting_files_outside_is_refused(tmp_path):
    need("sandbox", WHY)
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "data.txt").write_text("precious")
    venv_config = Path(sys.prefix) / "pyvenv.cfg"
    before = venv_config.read_bytes() if venv_config.exists() else None
    json_module = SANDBOX.environment.prefix + "/lib/python{}.{}/json".format(*sys.version_info[:2])
    result = run(f"""
        import os, shutil
        for action in (lambda: shutil.rmtree({str(keep)!r}), lambda: os.remove({str(venv_config)!r}),
                       lambda: shutil.rmtree({json_module!r})):
            try:
                action()
                print("deleted")
            except OSError as exc:
                print("refused", exc.errno)
    """)
    assert result.stopped is None and result.stdout.count("refused") == 3
    assert result.stdout.splitlines()[-1] == f"refused {errno.EROFS}"  # the program environment: visible, read-only
    assert (keep / "data.txt").read_text() == "precious"
    assert (SANDBOX.environment.path / "prefix" / Path(json_module).relative_to(SANDBOX.environment.prefix)
            / "__init__.py").is_file()
    assert (venv_config.read_bytes() if venv_config.exists() else None) == before


def test_a_shell_command_cannot_even_start(tmp_path):
    """The program environment holds no shell and no command: ``os.system`` answers 127 (no ``/bin/sh``) and a
    command run directly is not found; nothing is written anywhere."""
    need("sandbox", WHY)
    marker = tmp_path / "pwned"
    result = run(f"""
        import os, subprocess
        print(os.waitstatus_to_exitcode(os.system("echo x > {marker}; echo x > /tmp/pwned; id -u")))
        for command in (["/bin/sh", "-c", "id"], ["/usr/bin/id"], ["python3", "-c", "print(1)"]):
            try:
                subprocess.run(command)
                print("ran", command[0])
            except OSError as exc:
                print("refused", type(exc).__name__)
        print(os.path.exists("/tmp/pwned"))
    """)
    assert result.stopped is None
    assert result.stdout.splitlines() == ["127"] + ["refused FileNotFoundError"] * 3 + ["False"]
    assert not marker.exists() and not Path("/tmp/pwned").exists()


def test_no_secret_is_visible(monkeypatch):
    need("sandbox", WHY)
    monkeypatch.setenv("GRAFTBENCH_TEST_SECRET", "s3cr3t-value-7f3a")
    home_ssh = Path(os.path.expanduser("~")) / ".ssh"
    result = run(f"""
        import os
        print(sorted(os.environ))
        print(os.path.exists("/root/.ssh"), os.path.exists({str(home_ssh)!r}), sorted(os.listdir("/root")))
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    print(pid, open("/proc/%s/environ" % pid, "rb").read())
                except OSError as exc:
                    print(pid, "refused", exc.errno)
    """)
    assert result.stopped is None
    assert "s3cr3t" not in result.stdout and "GRAFTBENCH" not in result.stdout
    names, ssh = result.stdout.splitlines()[:2]
    assert set(eval(names)) <= {"LC_CTYPE", "PWD"}  # Python's locale coercion and bwrap's PWD, nothing inherited
    assert ssh.startswith("False False ")
    assert ".ssh" not in ssh
    # only the sandbox's own processes are visible: the program is process 1
    pids = [line.split()[0] for line in result.stdout.splitlines()[2:]]
    assert "1" in pids and len(pids) <= 3


def test_the_network_is_refused_even_on_the_hosts_loopback():
    need("sandbox", WHY)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        result = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')\n")
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert (result.stopped, result.stdout) == ("crashed", "")
    assert "Address family not supported" in result.stderr_tail  # the seccomp filter: AF_UNIX sockets only
    dns = run("import socket\nprint(socket.gethostbyname('pypi.org'))\n")
    assert dns.stopped == "crashed" and dns.stdout == "" and "gaierror" in dns.stderr_tail


def test_a_file_over_the_size_limit_is_refused():
    need("sandbox", WHY)
    result = run("open('big', 'wb').write(b'x' * (2 << 20))\n", SandboxLimits(file_bytes=1 << 20))
    assert result.stopped == "crashed"
    assert "File too large" in result.stderr_tail


def test_the_sandbox_dies_with_graftbench(tmp_path):
    """graftbench killed (SIGKILL) while a program sleeps: the program goes too (parent-death signals)."""
    need("sandbox", WHY)
    script = tmp_path / "host.py"
    script.write_text("from graftbench.programs import sandbox\nfrom graftbench.settings import SandboxLimits\n"
                      "sandbox.open_sandbox().run('import time\\nprint(1, flush=True)\\ntime.sleep(600)\\n', "
                      "SandboxLimits(wall_s=600))\n")
    # TMPDIR: the killed host cannot remove its sandbox's (empty) mount point; let it fall in tmp_path
    host = subprocess.Popen([sys.executable, str(script)], cwd=Path(__file__).resolve().parents[2],
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 30
        while not sandbox_user_processes(host.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sandbox_user_processes(host.pid), "the program never started"
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()
    started = time.monotonic()
    left = wait_until_gone(host.pid, wait_s=10.0)
    assert left == [], f"still there {time.monotonic() - started:.1f} s after graftbench was killed"


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="cpu_s"):
        SandboxLimits(cpu_s=0)


def test_the_sandbox_is_described():
    need("sandbox", WHY)
    found = SANDBOX.isolation
    assert found.level == "bwrap" and found.description.startswith("bwrap: pid, net")
    assert f"user {bwrap.ids()[0]}:" in found.description and "seccomp" in found.description


def _syscall_number(name: str) -> int:
    import pyseccomp

    return pyseccomp.resolve_syscall(pyseccomp.system_arch(), name)


@pytest.fixture
def planted_key():
    """A key planted in this process's session keyring (graftbench's), removed afterwards: its serial."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    payload = b"planted-secret-51e2"
    serial = libc.syscall(_syscall_number("add_key"), b"user", b"graftbench-planted", payload, len(payload),
                          ctypes.c_long(-3))  # KEY_SPEC_SESSION_KEYRING
    assert serial > 0, os.strerror(ctypes.get_errno())
    yield serial
    libc.syscall(_syscall_number("keyctl"), 3, ctypes.c_long(serial))  # KEYCTL_REVOKE


def test_a_key_planted_in_the_session_keyring_is_not_readable(planted_key):
    need("sandbox", WHY)
    numbers = {name: _syscall_number(name) for name in ("keyctl", "add_key", "request_key")}
    result = run(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def call(*args):
            r = libc.syscall(*args)
            print(r, os.strerror(ctypes.get_errno()) if r < 0 else "ok")
        buf = ctypes.create_string_buffer(256)
        call({numbers['keyctl']}, 11, ctypes.c_long({planted_key}), buf, 256)  # KEYCTL_READ the planted key
        call({numbers['keyctl']}, 0, ctypes.c_long(-3), 0)  # the session keyring's id
        call({numbers['keyctl']}, 0, ctypes.c_long(-4), 0)  # the user keyring's id
        call({numbers['request_key']}, b"user", b"graftbench-planted", None, 0)
        call({numbers['add_key']}, b"user", b"left-for-later", b"x", 1, ctypes.c_long(-4))
        print(buf.raw.rstrip(b"\\0"))
        try:
            print("graftbench-planted" in open("/proc/keys").read())
        except OSError as exc:
            print("no /proc/keys", exc.errno)
    """)
    assert result.stopped is None
    lines = result.stdout.splitlines()
    assert lines[:5] == ["-1 Operation not permitted"] * 5
    assert lines[5] == "b''" and "planted-secret" not in result.stdout
    assert lines[6] in ("False", "no /proc/keys 13")  # a new, empty session keyring: not even its name shows


def test_refused_system_calls_answer_eperm_and_fork_and_threads_still_work():
    need("sandbox", WHY)
    numbers = {name: _syscall_number(name) for name in ("io_uring_setup", "perf_event_open", "bpf", "ptrace",
                                                         "unshare", "mount")}
    result = run(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        params = ctypes.create_string_buffer(256)
        for name, args in [("io_uring_setup", (8, params)), ("perf_event_open", (params, 0, -1, -1, 0)),
                           ("bpf", (0, params, 64)), ("ptrace", (16, 1, 0, 0)), ("unshare", (0x10000000,)),
                           ("mount", (b"none", b"/tmp", b"tmpfs", 0, None))]:
            r = libc.syscall({numbers!r}[name], *args)
            print(name, r, os.strerror(ctypes.get_errno()))
        pid = os.fork()  # clone3 answers ENOSYS: the C library falls back to clone, and a plain fork works
        if pid == 0:
            os._exit(7)
        print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        import threading
        seen = []
        thread = threading.Thread(target=seen.append, args=("thread",))
        thread.start()
        thread.join()
        print(*seen)
    """)
    assert result.stopped is None
    assert result.stdout.splitlines() == [f"{name} -1 Operation not permitted" for name in
                                          ("io_uring_setup", "perf_event_open", "bpf", "ptrace", "unshare",
                                           "mount")] + ["fork 7", "thread"]


def test_linux_aio_is_refused_so_the_machines_aio_budget_stays_whole():
    """Linux AIO contexts come from one machine-wide budget (``fs.aio-max-nr``, 65,536 by default), not per user or
    namespace: one ``io_setup(65536)`` in a program once took it whole for the run, and every ``io_setup`` on the
    host failed with EAGAIN meanwhile. The filter refuses the AIO calls."""
    need("sandbox", WHY)
    numbers = {name: _syscall_number(name) for name in ("io_setup", "io_submit", "io_getevents")}
    result = run(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        context = ctypes.c_ulong(0)
        for name, args in [("io_setup", (65536, ctypes.byref(context))), ("io_submit", (0, 0, None)),
                           ("io_getevents", (0, 0, 0, None, None))]:
            r = libc.syscall({numbers!r}[name], *args)
            print(name, r, os.strerror(ctypes.get_errno()))
    """)
    assert result.stopped is None, result.stderr_tail
    assert result.stdout.splitlines() == [f"{name} -1 Operation not permitted"
                                          for name in ("io_setup", "io_submit", "io_getevents")]


def test_no_pseudo_terminal_can_be_opened():
    """Pseudo-terminals of every devpts instance but the host's own come from one machine-wide budget
    (``kernel.pty.max`` less ``kernel.pty.reserve``); a run holding ``/dev/ptmx`` open in each of its processes once
    took some 2,000 of its 3,072. ``/dev/pts`` is an empty tmpfs now: ``/dev/ptmx`` leads nowhere."""
    need("sandbox", WHY)
    result = run("""
        import errno, os, pty
        for opener in (lambda: os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY), pty.openpty):
            try:
                opener()
                print("opened")
            except OSError as exc:
                print("refused", errno.errorcode.get(exc.errno, exc.errno))
        print(os.listdir("/dev/pts"), os.access("/dev/pts", os.W_OK))
    """)
    assert result.stopped is None, result.stderr_tail
    lines = result.stdout.splitlines()
    assert lines[0] == "refused ENOENT" and lines[1].startswith("refused") and lines[2] == "[] False"


def test_vsock_netlink_packet_and_inet_sockets_are_refused():
    need("sandbox", WHY)
    result = run("""
        import errno, socket
        for family, kind in [(40, socket.SOCK_STREAM), (16, socket.SOCK_RAW), (17, socket.SOCK_RAW),
                             (socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM)]:
            try:
                s = socket.socket(family, kind)
                if family == 40:
                    s.bind((0xFFFFFFFF, 5555))  # VMADDR_CID_ANY
                    s.listen()
                print(family, "opened")
            except OSError as exc:
                print(family, errno.errorcode[exc.errno])
        a, b = socket.socketpair()
        a.sendall(b"unix ok")
        print(b.recv(16).decode())
    """)
    assert result.stopped is None
    assert result.stdout.splitlines() == ["40 EAFNOSUPPORT", "16 EAFNOSUPPORT", "17 EAFNOSUPPORT",
                                          f"{int(socket.AF_INET)} EAFNOSUPPORT",
                                          f"{int(socket.AF_INET6)} EAFNOSUPPORT", "unix ok"]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 machine code")
def test_system_calls_of_the_other_x86_abis_are_killed():
    """The filter reads the system call's number for x86-64 only: an x32 call (number | 0x40000000) or an i386 one
    (``int 0x80``) would reach ``socket(AF_INET)`` past it, so libseccomp's architecture check kills either with
    SIGSYS (31), while the same call through the x86-64 ``syscall`` instruction answers ``-EAFNOSUPPORT``."""
    need("sandbox", WHY)
    result = run("""
        import ctypes, mmap, os, sys
        def code(hex_text, restype, argtypes):
            page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            page.write(bytes.fromhex(hex_text))
            function = ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
            function.page = page
            return function
        # rax = nr; rdi, rsi, rdx = the three arguments; syscall; ret
        native = code("4889f84889f74889d64889ca0f05c3", ctypes.c_long, (ctypes.c_long,) * 4)
        # push rbx; eax = 359 (i386 socket); ebx = AF_INET; ecx = SOCK_STREAM; edx = 0; int 0x80; pop rbx; ret
        i386 = code("53b867010000bb02000000b90100000031d2cd805bc3", ctypes.c_int, ())
        for name, call in [("x86-64", lambda: native(41, 2, 1, 0)), ("x32", lambda: native(41 | 0x40000000, 2, 1, 0)),
                           ("i386", i386)]:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                os._exit(-call())  # only reached when the call returned
            status = os.waitpid(pid, 0)[1]
            print(name, "signal" if os.WIFSIGNALED(status) else "returned",
                  os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    """)
    assert result.stopped is None, result.stderr_tail
    assert result.stdout.splitlines() == [f"x86-64 returned {errno.EAFNOSUPPORT}", f"x32 signal {signal.SIGSYS}",
                                          f"i386 signal {signal.SIGSYS}"]


def test_unix_socket_buffers_count_against_the_runs_memory():
    """Data queued in AF_UNIX socket pairs (kernel memory, no process's pages) is charged to the run's memory
    cgroup: children filling socket buffers past a 64 MiB cap are killed there, and the run is ``memory``. Without
    the charge every child would queue its share and the program would print more than the cap and exit 0."""
    need("sandbox", WHY)
    result = run("""
        import os, select, socket, sys
        report_r, report_w = os.pipe()
        children = []
        for _ in range(12):  # at most 16 MiB each: 192 MiB in all if the charge were missing, 3 times the cap
            pid = os.fork()
            if pid == 0:
                queued, ends = 0, []
                while queued < 16 << 20 and len(ends) < 56:  # within 64 open files
                    ends += socket.socketpair()
                    for end in ends[-2:]:
                        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)  # up to wmem_max
                        end.setblocking(False)
                        try:
                            while queued < 16 << 20:
                                queued += end.send(bytes(65536))
                        except BlockingIOError:
                            pass
                os.write(report_w, b"%d\\n" % queued)
                os.read(os.pipe()[0], 1)  # hold the buffers until killed
            children.append(pid)
        text = b""
        while text.count(b"\\n") < len(children):
            if select.select([report_r], [], [], 0.05)[0]:
                text += os.read(report_r, 4096)
            for pid in children:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    sys.exit("a child died")
        print("queued MiB", sum(int(n) for n in text.split()) >> 20)
    """, SandboxLimits(cpu_s=5, wall_s=20.0, memory_bytes=64 * MiB, processes=16))
    assert result.stopped == "memory", (result.stopped, result.stdout, result.stderr_tail)


def test_children_together_are_capped_at_the_runs_memory():
    """Four children each holding 200 MiB under a 512 MiB run: the cap is the run's, so at most two hold theirs at
    once and the kernel kills the others (a child may be killed after it held its block, when a later one needs the
    room: each child is followed by its pid until it is either dead or holding)."""
    need("sandbox", WHY)
    result = run("""
        import os, select, time
        held_r, held_w = os.pipe()
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                block = bytearray(200 << 20)  # zero-filled: every page touched
                os.write(held_w, b"%d\\n" % os.getpid())
                os.read(os.pipe()[0], 1)  # hold it until killed
            children.append(pid)
        held, dead, text = set(), {}, b""
        def reap():
            for pid in children:
                if pid not in dead:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        dead[pid] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1
        while len(held | set(dead)) < 4:  # each child dead or holding its block
            if select.select([held_r], [], [], 0.05)[0]:
                text += os.read(held_r, 64)
                held = {int(line) for line in text.split()}
            reap()
        for _ in range(20):  # a victim killed for the last allocation is reaped within a second
            time.sleep(0.05)
            reap()
        print(len(held - set(dead)), sorted(dead.values()))
    """, SandboxLimits(cpu_s=10, wall_s=30.0, memory_bytes=512 * MiB, processes=16))
    assert result.stopped is None
    holding, killed = re.fullmatch(r"(\d) \[([\d, ]*)\]\n", result.stdout).groups()
    assert int(holding) * 200 < 512 and int(holding) <= 2
    assert [int(k) for k in killed.split(", ")] == [signal.SIGKILL] * (4 - int(holding))


def test_memfd_pages_count_against_the_runs_memory():
    need("sandbox", WHY)
    result = run("""
        import os
        held = []
        for n in range(1, 50):  # 8 MiB each, under the file size limit; 392 MiB in all
            held.append(os.memfd_create("hoard"))
            os.write(held[-1], bytes(8 << 20))
            print(n * 8, flush=True)
    """, SandboxLimits(cpu_s=10, wall_s=30.0, memory_bytes=256 * MiB))
    assert result.stopped == "memory" and result.exit_status == 128 + signal.SIGKILL
    assert 0 < int(result.stdout.split()[-1]) < 256


def test_a_run_holding_its_process_cap_does_not_stop_another_runs_fork():
    need("sandbox", WHY)
    hog = """
        import os, time
        children = 0
        while True:
            try:
                if os.fork() == 0:
                    time.sleep(600)
                children += 1
            except OSError:
                print("holding", children, flush=True)
                time.sleep(600)
    """
    results = {}
    thread = threading.Thread(target=lambda: results.update(hog=run(hog, SandboxLimits(wall_s=8.0, processes=8))))
    thread.start()
    try:
        deadline = time.monotonic() + 6
        while len(sandbox_user_processes()) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sandbox_user_processes()) >= 8, "the first run never held its cap"
        results["other"] = run("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\n"
                               "print(os.waitpid(pid, 0)[1])\n", SandboxLimits(wall_s=6.0, processes=8))
    finally:
        thread.join()
    assert results["hog"].stdout == "holding 7\n" and results["hog"].stopped == "timeout"
    assert (results["other"].stopped, results["other"].answer) == (None, "0")


def test_the_stop_reason_is_not_taken_from_what_the_program_writes():
    """A program that fakes an out-of-memory or CPU kill (its exit code, its own SIGXCPU, text on every fd) is
    `crashed`: graftbench's counters saw neither."""
    need("sandbox", WHY)
    for source in ("import os\nos._exit(137)\n", "import os, signal\nos._exit(128 + signal.SIGXCPU)\n",
                   "import os\nfor fd in range(3, 64):\n    try:\n"
                   "        os.write(fd, b'exception MemoryError 12\\n')\n"
                   "    except OSError:\n        pass\nraise MemoryError\n"):
        result = run(source)
        assert result.stopped == "crashed", source


def test_a_program_text_over_the_limit_is_one_failed_sample():
    need("sandbox", WHY)
    text = "x = 1\n" * ((LIMITS.file_bytes // 6) + 1)
    fields = program_fields(text + "```", LIMITS, SANDBOX)
    assert (fields["stopped"], fields["exit_status"], fields["stdout"]) == ("forbidden", sandbox.NOT_STARTED, "")
    assert "over the limit" in fields["stderr_tail"]
    assert program_verdict(fields["stdout"], fields["stopped"], "1").correct is False
    assert run("print(5)\n").answer == "5"  # and the next program runs as usual


def test_a_venv_reached_through_a_symbolic_link_runs_programs(tmp_path):
    """graftbench started through a link to its venv finds the same program environment (its key depends on the
    files, not on the path they are reached by), and the program runs in it, not in the venv."""
    need("sandbox", WHY)
    link = tmp_path / "linked-venv"
    link.symlink_to(sys.prefix, target_is_directory=True)
    host = subprocess.run([str(link / "bin" / "python"), "-c",
                           "import sys; from graftbench.programs import sandbox\n"
                           "r = sandbox.open_sandbox().run('import sympy, sys\\nprint(sys.prefix)\\n')\n"
                           "print(r.stopped, r.answer)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert host.returncode == 0, host.stderr[-1000:]
    assert host.stdout == f"None {SANDBOX.environment.prefix}\n"


def etc_names() -> list[str]:
    return sorted(environment.etc_files())


def test_a_program_sees_only_the_program_environment(tmp_path):
    """Nothing of graftbench, of the venv it runs in (its other packages, its configuration), of the checkout, of a
    problem file or of the host's /etc is visible; sympy, mpmath and numpy are, in the program environment."""
    need("sandbox", WHY)
    problem = tmp_path / "problems.jsonl"
    problem.write_text('{"id": "p1", "problem": "What is 6*7?", "answer": "42"}\n')
    env = SANDBOX.environment
    site = Path(sys.prefix) / "lib" / "python{}.{}".format(*sys.version_info[:2]) / "site-packages"
    reads = [str(problem), str(AIME2024), str(ROOT / "graftbench" / "__init__.py"),
             str(Path(sys.prefix) / "pyvenv.cfg"),
             str(site / "typer" / "__init__.py"), str(site / "torch" / "__init__.py"), "/etc/hostname", "/etc/shadow",
             "/usr/lib/python3/dist-packages", "/usr/bin/env"]
    result = run(f"""
        import importlib, os
        for name in ("graftbench", "typer", "torch", "transformers", "pip", "setuptools"):
            try:
                importlib.import_module(name)
                print("imported", name)
            except ImportError as exc:
                print("refused", type(exc).__name__)
        for path in {reads!r}:
            try:
                open(path, "rb").read()
                print("read", path)
            except OSError as exc:
                print("refused", type(exc).__name__)
        print(sorted(os.listdir("/")), sorted(os.listdir("/etc")), sorted(os.listdir("/usr")))
        import sympy, mpmath, numpy
        print(sympy.__file__.startswith({env.prefix!r}), int(numpy.arange(5).sum()), mpmath.mpf(2) ** 10)
    """)
    assert result.stopped is None, result.stderr_tail
    lines = result.stdout.splitlines()
    assert lines[:6] == ["refused ModuleNotFoundError"] * 6
    assert lines[6:6 + len(reads)] == ["refused FileNotFoundError"] * len(reads)
    links = [name for name in ("lib", "lib32", "lib64", "libx32") if os.path.islink("/" + name)]  # merged /usr
    top = {destination.strip("/").split("/")[0] for _, destination in env.binds()}
    under_usr = {destination.split("/")[2] for _, destination in env.binds() if destination.startswith("/usr/")}
    assert lines[-2] == " ".join(str(sorted(names)) for names in (
        top | set(links) | {"dev", "proc", "sandbox", "tmp", "usr"}, etc_names(), under_usr | {"bin"}))
    assert lines[-1] == "True 10 1024.0"
    assert env.describe() in result.isolation and "sympy" in result.isolation


@pytest.mark.parametrize("lack, named", [
    ("bwrap", "bwrap is not installed: install bubblewrap (`apt-get install bubblewrap`"),
    ("root", "program mode must run as root"),
    ("cgroup", "the cgroup v1 'memory' hierarchy is not mounted at"),
    ("cgroup-v2", "only cgroup v2 is mounted at"),
    ("environment", "is not built: run `make program-env`"),
])
def test_without_a_facility_no_program_runs_and_the_refusal_names_it(monkeypatch, tmp_path, lack, named):
    ran = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: ran.append(a) or pytest.fail("something was started"))
    if lack == "bwrap":
        monkeypatch.setattr(bwrap, "tools", lambda: {"bwrap": None, "prlimit": "/usr/bin/prlimit",
                                                             "setpriv": "/usr/bin/setpriv"})
    elif lack == "root":
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
    elif lack == "environment":
        monkeypatch.setattr(bwrap, "missing", lambda: "")  # the machine has every tool...
        monkeypatch.setattr(environment, "root", lambda: tmp_path / "no-environment")  # ...but no build here
    else:
        monkeypatch.setattr(cgroup, "ROOT", str(tmp_path))  # a machine mounting no cgroup hierarchy...
        if lack == "cgroup-v2":
            (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")  # ...or only the unified one
    with pytest.raises(sandbox.SandboxError) as refused:
        sandbox.open_sandbox()
    message = str(refused.value)
    assert named in message and "\n" not in message and message.startswith("program mode needs the sandbox")
    assert ran == []


def test_program_mode_refuses_to_start_without_the_sandbox(monkeypatch):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    monkeypatch.setattr(bwrap, "tools", lambda: {"bwrap": None, "prlimit": "/usr/bin/prlimit",
                                                         "setpriv": "/usr/bin/setpriv"})
    result = CliRunner().invoke(app, ["solve", "--mode", "program"])
    assert result.exit_code == 2
    assert "bwrap is not installed" in result.output and "apt-get install bubblewrap" in result.output
