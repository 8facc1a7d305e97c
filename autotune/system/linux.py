"""Every Linux-only call in one place: /proc (memory, CPU time), prctl, glibc's mallopt and
mallinfo2, flock, CPU affinity.

Each function degrades to a harmless answer where the call does not exist (another OS,
another libc), and says so in its return value, so callers record what they could measure
instead of failing. psutil would cover the /proc reads, but not prctl, mallopt or
clear_refs, which the CPU memory measurement needs; one small module of plain calls is the
smaller dependency.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
from contextlib import contextmanager

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child: get SIGKILL when the parent dies, even by SIGKILL (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def process_start(pid: int) -> str | None:
    """A process's start time since boot (/proc/PID/stat), or None when it is gone. A zombie
    (dead, not yet reaped) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]  # field 3: state; 22: start time
    except (OSError, IndexError):
        return None


def cpu_model_name() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def usable_cpus() -> list:
    """The numbers of the cores this process may run on (its affinity: a container's CPU set)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """How many cores this process may run on, not the host's count."""
    return len(usable_cpus())


def pin_to_share(k: int, n: int) -> list:
    """Restrict this process (and what it starts later) to the k-th of n equal shares of its
    cores; returns the share. CPU workers each take one, so that one worker's trial neither
    slows another's nor counts as contention on its cores. torch sizes its thread pool from
    the affinity of the process that first uses it, so trial processes started after this
    use the share's cores and no more."""
    cpus = usable_cpus()
    share = cpus[k * len(cpus) // n:(k + 1) * len(cpus) // n] or cpus[k % len(cpus):k % len(cpus) + 1]
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, share)
    return share


def cpu_busy_seconds(cpus) -> float | None:
    """CPU time the cores ``cpus`` spent on anything but idle and I/O wait since boot
    (/proc/stat; steal counted as busy: another guest had the core), or None where unreadable."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    wanted = {f"cpu{c}" for c in cpus}
    busy = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if name in wanted:
                    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[:8])
                    busy += user + nice + system + irq + softirq + steal
    except (OSError, ValueError):
        return None
    return busy / tick


def pid_cpu_seconds(pid: int) -> float | None:
    """User and system CPU time of process ``pid`` (/proc/PID/stat), or None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return (int(fields[11]) + int(fields[12])) / tick  # utime, stime: fields 14 and 15 of stat(5)


def process_cpu_seconds() -> float:
    """User and system CPU time of this process, all its threads."""
    t = os.times()
    return t.user + t.system


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def status_bytes(field: str) -> int | None:
    """A memory field of /proc/self/status (``VmHWM``, ``RssFile``, ...) in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_bytes() -> int:
    peak = status_bytes("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def reset_peak_rss() -> bool:
    """Restart the kernel's peak RSS counter (VmHWM) at the current RSS; False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def heap_in_use_bytes() -> int | None:
    """Bytes the program holds from malloc (glibc's mallinfo2: in-use heap chunks plus mapped
    blocks, all arenas), or None where the libc has no mallinfo2 (not glibc, or glibc < 2.33).
    Unlike RSS, it does not move when the allocator keeps or returns freed pages."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def mmap_threshold(nbytes: int) -> bool:
    """Make glibc map each allocation above ``nbytes`` on its own (returned to the system when
    freed), and give back what its heap holds free; False where the libc is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, nbytes) == 1
        libc.malloc_trim(0)
        return ok
    except (OSError, AttributeError):
        return False


@contextmanager
def file_lock(path):
    """An exclusive flock on ``path`` (created if missing) for the duration of the block."""
    import fcntl

    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
