"""A seccomp-BPF filter for sandboxed generated code, built in pure Python (no libseccomp).

The filter allows every system call except the ones listed in `DENIED` (EPERM), `clone3` (ENOSYS,
so the C library falls back to `clone`) and `clone` without CLONE_THREAD (EPERM: threads are
allowed, new processes are not). Wrong architecture or the x32 ABI: the process is killed.
With it a program cannot start a process (`fork`, `vfork`, `execve`, `posix_spawn`, multiprocessing,
`_posixsubprocess`), open a socket, trace another process or reach into it by pidfd, mount, enter or
create namespaces, or reach the kernel's riskier interfaces (bpf, perf, userfaultfd, keyrings,
io_uring, the kernel log). It also cannot make memory or kernel objects that no limit of the sandbox
counts: memfd and secret memory, System V shared memory, message queues and semaphores, POSIX
message queues (their pages would sit outside the address-space rlimit and the size-capped /tmp),
inotify and fanotify instances (a per-user count, shared with every process of that uid). Threads
stay allowed; the RLIMIT_NPROC of the sandbox's unprivileged uid bounds them.

The sandbox's own bootstrap installs it (prctl PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP) before
any generated code runs; a filter cannot be removed afterwards. The numbers are Linux x86_64's
(asm/unistd_64.h); on another architecture `filter_program()` returns None and the sandbox says
so in its isolation line.
"""

from __future__ import annotations

import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_THREAD = 0x00010000

# BPF opcodes (linux/bpf_common.h, linux/seccomp.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000

# struct seccomp_data: nr (u32 @0), arch (u32 @4), instruction_pointer (u64 @8), args[6] (u64 @16)
_NR, _ARCH, _ARG0 = 0, 4, 16

X86_64 = {
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "execveat": 322,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "socket": 41,
    "socketpair": 53,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "unshare": 272,
    "setns": 308,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsmount": 432,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "mknod": 133,
    "mknodat": 259,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "init_module": 175,
    "finit_module": 313,
    "syslog": 103,
    "fsconfig": 431,
    "fspick": 433,
    "mount_setattr": 442,
    "pidfd_open": 434,
    "pidfd_getfd": 438,
    "pidfd_send_signal": 424,
    "process_madvise": 440,
    "process_mrelease": 448,
    "memfd_create": 319,
    "memfd_secret": 447,
    "shmget": 29,
    "shmat": 30,
    "shmctl": 31,
    "semget": 64,
    "semop": 65,
    "semctl": 66,
    "semtimedop": 220,
    "msgget": 68,
    "msgsnd": 69,
    "msgrcv": 70,
    "msgctl": 71,
    "mq_open": 240,
    "inotify_init": 253,
    "inotify_init1": 294,
    "fanotify_init": 300,
}
X86_64_CLONE, X86_64_CLONE3 = 56, 435
DENIED = tuple(X86_64)


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter as `struct sock_filter[]` bytes for this machine, or None where it is not built."""
    if (machine or platform.machine()) != "x86_64":
        return None
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    denied = list(X86_64.values())
    prog = [
        _insn(_LD_W_ABS, 0, 0, _ARCH),
        _insn(_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _insn(_RET_K, 0, 0, RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _NR),
        _insn(_JGE_K, 0, 1, X32_SYSCALL_BIT),
        _insn(_RET_K, 0, 0, RET_KILL_PROCESS),
    ]
    for nr in denied:  # jeq nr -> the next instruction (return EPERM), else skip it
        prog += [_insn(_JEQ_K, 0, 1, nr), _insn(_RET_K, 0, 0, eperm)]
    prog += [
        _insn(_JEQ_K, 0, 1, X86_64_CLONE3),
        _insn(_RET_K, 0, 0, enosys),
        _insn(_JEQ_K, 1, 0, X86_64_CLONE),
        _insn(_RET_K, 0, 0, RET_ALLOW),
        _insn(_LD_W_ABS, 0, 0, _ARG0),  # clone's flags (low 32 bits)
        _insn(_JSET_K, 0, 1, CLONE_THREAD),
        _insn(_RET_K, 0, 0, RET_ALLOW),
        _insn(_RET_K, 0, 0, eperm),
    ]
    return b"".join(prog)
