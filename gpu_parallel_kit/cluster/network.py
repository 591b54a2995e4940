"""A loopback-only network for the workers of a local multi-worker run (Linux).

TensorFlow's gRPC server, which MultiWorkerMirroredStrategy starts in every worker, always listens
on every interface (`0.0.0.0:port`, hard-coded in TensorFlow's grpc_server_lib); no option binds it
to 127.0.0.1. A local run therefore moves its workers into a network namespace of their own whose
only interface is loopback: their servers are then reachable from this machine's workers only,
never from the network. Linux offers that to root, and to other users through a user namespace
where the system allows it. Elsewhere a local run refuses to start unless the user accepts open
ports (`GPK_MULTIWORKER_OPEN_PORTS=1`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
from pathlib import Path

OPEN_PORTS_VARIABLE = "GPK_MULTIWORKER_OPEN_PORTS"
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh22x"  # struct ifreq: interface name, then the flags of the union
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def open_ports_allowed() -> bool:
    return os.environ.get(OPEN_PORTS_VARIABLE, "") not in ("", "0")


def enter_loopback_only_network() -> str:
    """Move this process (and the children it starts after) into a new network namespace with
    loopback up and nothing else. Returns how; raises OSError when the system refuses.

    Must be called while the process has a single thread (a user namespace requires it).
    """
    unshare = _libc_unshare()
    if unshare(_CLONE_NEWNET) == 0:
        how = "private network namespace (loopback only)"
    else:
        first = ctypes.get_errno()
        uid, gid = os.getuid(), os.getgid()
        if unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(
                error,
                f"no private network namespace: unshare refused ({os.strerror(first)}, "
                f"then with a user namespace: {os.strerror(error)})",
            )
        # The same user id inside and out; the new namespaces' capabilities allow the rest.
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        how = "private user and network namespace (loopback only)"
    _bring_up_loopback()
    return how


def _libc_unshare():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        return libc.unshare
    except (OSError, AttributeError) as error:
        raise OSError(f"this system has no network namespaces ({error})") from None


def _bring_up_loopback() -> None:
    """A new namespace's loopback starts down; bring it up (the `ip link set lo up` ioctl)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def network_interfaces(pid: int | str = "self") -> list[str]:
    """Interfaces of the network namespace process `pid` lives in."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return [line.split(":", 1)[0].strip() for line in lines if ":" in line]


def listening_addresses(pid: int | str = "self") -> list[tuple[str, int]]:
    """(address, port) of every TCP socket listening in process `pid`'s network namespace."""
    found = []
    for table, size in (("tcp", 4), ("tcp6", 16)):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _LISTEN:
                address, port = fields[1].split(":")
                found.append((_decode_address(address, size), int(port, 16)))
    return found


def listening_report() -> dict[str, object]:
    """Where this process's servers can be reached from, for a worker's row (Linux: read from
    /proc; empty elsewhere)."""
    try:
        listening = listening_addresses()
        interfaces = network_interfaces()
    except OSError:
        return {}
    return {
        "listening": [
            f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
            for address, port in listening
        ],
        "network_interfaces": interfaces,
        "reachable_from_network": reachable_from_network(listening, interfaces),
    }


def _decode_address(text: str, size: int) -> str:
    """/proc/net/tcp writes addresses as native-endian 32-bit words in hex."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, size, 4))
    family = socket.AF_INET if size == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words)


def reachable_from_network(listening: list[tuple[str, int]], interfaces: list[str]) -> bool:
    """Whether any listening socket can be reached from another machine: bound to a non-loopback
    address, or to a wildcard address in a namespace that has more than loopback."""
    loopback_only = set(interfaces) <= {"lo"}
    for address, _ in listening:
        if address in ("127.0.0.1", "::1") or address.startswith(("127.", "::ffff:127.")):
            continue  # loopback, IPv6's form of IPv4's loopback (gloo's sockets) included
        if address in ("0.0.0.0", "::") and loopback_only:
            continue
        return True
    return False
