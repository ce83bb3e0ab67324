"""The bpf(2) system call by number (the C library has no wrapper): one table for tunbench
(testbed/bpfdrop.py's drop filter) and the agent (bpfhost.py's tcx links), shipped in the
agent's zipapp, so standard library only.

Numbers from the kernel's tables (uapi asm/unistd_*.h, arch/*/entry/syscalls/syscall*.tbl):
x86_64 321 (unistd_64.h), i386 357 (unistd_32.h), the generic table's 280 (asm-generic/
unistd.h: aarch64, riscv64, loongarch64), 32-bit ARM EABI 386, powerpc 361, s390 351. The
number is the process's ABI, not the kernel's: a 32-bit Python on an x86_64 or aarch64
kernel uses the 32-bit table.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

SYS_BPF = {"x86_64": 321, "i386": 357, "i686": 357, "aarch64": 280, "riscv64": 280,
           "loongarch64": 280, "armv7l": 386, "armv8l": 386, "ppc64le": 361, "ppc64": 361,
           "s390x": 351}
# a 32-bit process on a 64-bit kernel (uname says the kernel's machine): its own table
COMPAT32 = {"x86_64": "i686", "aarch64": "armv8l"}


def number(machine: str | None = None, pointer_bytes: int | None = None) -> int:
    """bpf(2)'s number for this process (or for `machine` and a pointer size); OSError
    ENOSYS naming the machine when it is not in the table."""
    machine = machine or platform.machine()
    if (pointer_bytes or ctypes.sizeof(ctypes.c_void_p)) == 4:
        machine = COMPAT32.get(machine, machine)
    nr = SYS_BPF.get(machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"bpf(2) syscall number unknown on {machine}")
    return nr


def bpf(cmd: int, attr: ctypes.Array[ctypes.c_char], size: int | None = None) -> int:
    """bpf(cmd, attr, size): the result, or OSError with the kernel's errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    ret = int(libc.syscall(number(), cmd, attr, ctypes.sizeof(attr) if size is None else size))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret
