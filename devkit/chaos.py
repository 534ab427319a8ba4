"""Fault primitives for the chaos tests (``tests/test_chaos.py``) and the
soak benchmark's fault schedule (``python -m bench soak --chaos``).

Every fault that changes the machine (routes, mounts) is refused outside a
private namespace, so nothing here ever touches the host's routing or mounts:
run the scenario under ``PRIVATE_NAMESPACES`` (or ``unshare`` yourself).

Namespaces
    ``PRIVATE_NAMESPACES: list[str]``: the command prefix
    ``["unshare", "--net", "--mount", "--propagation", "private", "--"]``:
    a command run after it has a network (only a loopback, down) and mounts
    of its own, gone with its last process.
    ``loopback_up() -> None``: ``ip link set lo up`` (run inside the new
    network namespace before anything listens).
    ``private_network() -> bool``: whether this process's network namespace
    has no interface but the loopback (one ``unshare --net`` made);
    ``private_mounts() -> bool``: whether its mount namespace differs from
    one of its ancestors' (``unshare --mount`` made it).
    ``can_unshare() -> str``: why the namespaces cannot be made here ('' if
    they can: root, ``unshare``, ``ip`` and ``mount`` present).

Network to the test web
    ``cut_network(cidr: str) -> None``: make ``cidr`` unreachable (connects
    fail at once with ``EHOSTUNREACH``, packets of open connections are
    dropped): an ``ip rule`` of preference 50 ahead of the local table,
    which moves from preference 0 to 100 the first time. The test web's
    per-address layout is 127.1.0.0/16 (``TESTWEB_CIDR``;
    devkit/testweb/config.py ``layout_address``), so Redis on 127.0.0.1
    stays reachable.
    ``restore_network(cidr: str) -> None``: delete that rule (idempotent).
    ``network_cut(cidr) -> ContextManager[None]``: cut, then restore on exit.
    All three raise ``ChaosRefused`` outside a private network namespace.

WARC disk
    ``mount_tmpfs(path: Path, size_bytes: int) -> None``: mount a tmpfs of
    ``size_bytes`` at ``path`` (created if missing); ``ChaosRefused``
    outside a private mount namespace.
    ``on_private_tmpfs(path, size_bytes, command) -> list[str]``: a command
    line running ``command`` in a mount namespace of its own with that tmpfs
    mounted first (``unshare --mount --propagation private sh -c 'mount ...
    && exec command'``): the tmpfs is gone with the command.
    ``entered(pid: int, command, *, net=False, mount=False) -> list[str]``:
    ``command`` in process ``pid``'s network and/or mount namespace
    (``nsenter``): a crawl on a tmpfs a holder process keeps, its files
    outliving it.
    ``in_mounts_of(pid: int, path: Path) -> Path``: ``path`` as process
    ``pid`` sees it (``/proc/<pid>/root/<path>``: through its mount
    namespace), for ``disk_full`` on another process's private tmpfs
    (what ``nsenter --target PID --mount`` would reach, without a process).
    ``fill(path: Path, leave: int = 0) -> Path``: fill the filesystem holding
    the folder ``path`` until a write gets ``ENOSPC`` (``posix_fallocate``
    of the free space, then writes, ever smaller, down to one byte), then
    free ``leave`` bytes again (a larger write is cut part-way); the filler.
    ``disk_full(path: Path, leave: int = 0) -> ContextManager[Path]``:
    ``fill``, and remove the filler on exit (space returns at once).
    ``free_bytes(path: Path) -> int``: bytes free there (as root may use).

Processes
    ``stopped(pid: int) -> ContextManager[None]``: SIGSTOP ``pid``, SIGCONT
    it on exit (always, even when the body raises).
    ``frozen(pid: int) -> bool``: whether ``pid`` is stopped now (state T
    in ``/proc/<pid>/stat``).
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PRIVATE_NAMESPACES: list[str] = ["unshare", "--net", "--mount", "--propagation", "private", "--"]
#: the test web's per-address layout (127.1.0.1, ...: devkit/testweb/config.py)
TESTWEB_CIDR = "127.1.0.0/16"
#: the preference of the rule that cuts, ahead of the local table moved to _LOCAL_PREF
_CUT_PREF = 50
_LOCAL_PREF = 100
FILLER_NAME = ".chaos-filler"


class ChaosRefused(RuntimeError):
    """A fault that would change the host (routes, mounts) outside a private namespace."""


def _namespace(kind: str, pid: int | str = "self") -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def _parent(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def private_network() -> bool:
    """This process's network namespace has no interface but a loopback:
    one that ``unshare --net`` made, where routes can change harmlessly."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]  # per network namespace
    return [line.split(":", 1)[0].strip() for line in lines] == ["lo"]


def private_mounts() -> bool:
    """This process's mount namespace is not that of a process it descends
    from (``unshare --mount`` made it, below whoever started this one)."""
    try:
        mine = _namespace("mnt")
        pid = _parent("self")
    except OSError:
        return False
    while pid > 1:
        try:
            if _namespace("mnt", pid) != mine:
                return True
            pid = _parent(pid)
        except OSError:
            return False
    return False


def can_unshare() -> str:
    """Why the private namespaces cannot be made here ('' if they can)."""
    if os.geteuid() != 0:
        return "private namespaces need root"
    for tool in ("unshare", "ip", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run([*PRIVATE_NAMESPACES, "sh", "-c", "ip link set lo up && mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, text=True)
    return f"cannot make private namespaces: {probe.stderr.strip()}" if probe.returncode else ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def loopback_up() -> None:
    """``ip link set lo up``: inside a new network namespace, before anything listens."""
    if not private_network():
        raise ChaosRefused("loopback_up() runs inside a private network namespace (PRIVATE_NAMESPACES)")
    _ip("link", "set", "lo", "up")


def _refuse_on_host(what: str) -> None:
    if not private_network():
        raise ChaosRefused(f"{what} changes routing: only inside a private network namespace "
                           f"({shlex.join(PRIVATE_NAMESPACES)}), never on the host")


def _local_moved() -> None:
    """The local table's rule from preference 0 to _LOCAL_PREF, once, so a rule can go before it."""
    rules = [" ".join(line.split()) for line in _ip("rule", "show").stdout.splitlines()]
    if f"{_LOCAL_PREF}: from all lookup local" not in rules:
        _ip("rule", "add", "pref", str(_LOCAL_PREF), "lookup", "local")
    if "0: from all lookup local" in rules:
        _ip("rule", "del", "pref", "0", "lookup", "local")


def cut_network(cidr: str) -> None:
    """Make ``cidr`` unreachable from this network namespace (idempotent)."""
    _refuse_on_host("cut_network")
    _local_moved()
    restore_network(cidr)  # one rule per cidr, however often it is cut
    _ip("rule", "add", "pref", str(_CUT_PREF), "to", cidr, "unreachable")


def restore_network(cidr: str) -> None:
    """Undo ``cut_network(cidr)`` (nothing if it is not cut)."""
    _refuse_on_host("restore_network")
    while _ip("rule", "del", "pref", str(_CUT_PREF), "to", cidr, "unreachable", check=False).returncode == 0:
        pass


@contextmanager
def network_cut(cidr: str = TESTWEB_CIDR) -> Iterator[None]:
    """``cidr`` unreachable for the body of the ``with``."""
    cut_network(cidr)
    try:
        yield
    finally:
        restore_network(cidr)


def mount_tmpfs(path: Path, size_bytes: int) -> None:
    """A tmpfs of ``size_bytes`` at ``path``, in this private mount namespace."""
    if not private_mounts():
        raise ChaosRefused("mount_tmpfs() mounts only inside a private mount namespace "
                           "(unshare --mount --propagation private), never on the host")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"mount tmpfs at {path}: {done.stderr.strip()}")


def on_private_tmpfs(path: Path, size_bytes: int, command: Sequence[str]) -> list[str]:
    """``command`` in a mount namespace of its own, a tmpfs of ``size_bytes``
    mounted at ``path`` first (``path`` must exist)."""
    script = (f"mount -t tmpfs -o size={int(size_bytes)} tmpfs {shlex.quote(str(path))} "
              f"&& exec {shlex.join(command)}")
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]


def entered(pid: int, command: Sequence[str], *, net: bool = False, mount: bool = False) -> list[str]:
    """A command line running ``command`` in the network and/or mount
    namespace of process ``pid`` (``nsenter --target PID --net --mount``):
    a crawl in the namespaces a holder process keeps (``sleep infinity``
    under ``PRIVATE_NAMESPACES`` or ``on_private_tmpfs``), so what it leaves
    there (WARC files on the tmpfs) outlives it."""
    if not (net or mount):
        raise ValueError("entered() needs net=True, mount=True or both")
    flags = (["--net"] if net else []) + (["--mount"] if mount else [])
    return ["nsenter", "--target", str(pid), *flags, "--", *command]


def in_mounts_of(pid: int, path: Path) -> Path:
    """``path`` (absolute) as process ``pid`` sees it, through its mount namespace."""
    return Path(f"/proc/{pid}/root") / Path(path).relative_to("/")


def free_bytes(path: Path) -> int:
    """Bytes free on the filesystem holding ``path``, reserved blocks included (root's view)."""
    st = os.statvfs(path)
    return st.f_bfree * st.f_frsize


def fill(path: Path, leave: int = 0) -> Path:
    """Fill the filesystem holding the folder ``path`` until a write gets
    ``ENOSPC``, then free ``leave`` bytes of it again (rounded to the
    filesystem's blocks: a write larger than that is cut by ``ENOSPC``
    part-way); returns the filler file (in ``path``)."""
    filler = Path(path) / FILLER_NAME
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        free = free_bytes(path)
        if free > 0:
            try:
                os.posix_fallocate(fd, 0, free)
            except OSError as exc:  # not supported, or a little less than statvfs said
                if exc.errno not in (errno.ENOSPC, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
        os.lseek(fd, 0, os.SEEK_END)
        chunk = 1 << 20
        while chunk:
            try:
                os.write(fd, b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk //= 2
        if leave > 0:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    except BaseException:
        os.close(fd)
        filler.unlink(missing_ok=True)
        raise
    os.close(fd)
    return filler


@contextmanager
def disk_full(path: Path, leave: int = 0) -> Iterator[Path]:
    """The filesystem holding the folder ``path`` full (writes get ``ENOSPC``;
    ``leave``: but for that many bytes, see ``fill``) for the body of the
    ``with``; the filler is removed on exit."""
    filler = fill(path, leave)
    try:
        yield filler
    finally:
        filler.unlink(missing_ok=True)


def frozen(pid: int) -> bool:
    """Whether process ``pid`` is stopped now."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """Process ``pid`` stopped (SIGSTOP) for the body of the ``with``; continued
    (SIGCONT) on exit, whatever happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
