"""Where the workers of a multi-worker run live, as plain data: no TensorFlow here.

A local run makes its own cluster of W processes on this machine (loopback only); a named cluster
comes from a JSON file listing one TensorFlow server address per worker, the chief first, and the
address the starting process (a notebook, `gpk`) listens on for the workers to join:

    {"worker": ["node1:23456", "node2:23456"], "coordinator": "node1:23400"}

A TF_CONFIG-style file (`{"cluster": {"worker": [...]}, ...}`) is read too. The workers and the
coordinator prove they belong together with a shared secret, from `GPK_CLUSTER_KEY` or the file's
"key".
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import GpkError

KEY_VARIABLE = "GPK_CLUSTER_KEY"
LOOPBACK = "127.0.0.1"


class Address(NamedTuple):
    """A host and a port, as "host:port" names them."""

    host: str  # a name or an IP; an IPv6 host without its brackets
    port: int


@dataclass(frozen=True)
class ClusterSpec:
    """The hosts of a named cluster.

    >>> ClusterSpec(("node1:23456", "node2:23456"), "node1:23400", "secret")
    <ClusterSpec 2 workers, chief node1:23456, coordinator node1:23400>
    """

    workers: tuple[str, ...]  # "host:port" of each worker's TensorFlow server; index 0 is chief
    coordinator: str  # "host:port" the starting process listens on for workers to join
    key: str  # shared secret: only processes that know it can join or hand out work
    source: str = ""  # the file it was read from, for messages

    def __post_init__(self) -> None:
        if not self.workers:
            raise GpkError(f"the cluster {self._where} names no worker; list at least one")
        for address in (*self.workers, self.coordinator):
            split_address(address)
        if len(set(self.workers)) != len(self.workers):
            raise GpkError(f"the cluster {self._where} lists a worker address twice")
        if not self.key:
            raise GpkError(
                f"the cluster {self._where} has no shared key; set {KEY_VARIABLE} to the same "
                'secret on every host (or add "key" to the file)'
            )

    def __repr__(self) -> str:
        return (
            f"<ClusterSpec {len(self.workers)} workers, chief {self.workers[0]}, "
            f"coordinator {self.coordinator}>"
        )

    @property
    def _where(self) -> str:
        return self.source or "spec"

    @property
    def coordinator_address(self) -> Address:
        return split_address(self.coordinator)


def load_cluster(cluster: Any) -> ClusterSpec:
    """A ClusterSpec from a path to a JSON file, a dict of the same shape, or a ClusterSpec."""
    if isinstance(cluster, ClusterSpec):
        return cluster
    source = ""
    if isinstance(cluster, str | Path):
        path = Path(cluster)
        if not path.is_file():
            raise GpkError(
                f"cluster={str(cluster)!r} is not a file; pass the path of a JSON file like "
                '{"worker": ["host1:23456", "host2:23456"], "coordinator": "host1:23400"}'
            )
        try:
            cluster = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise GpkError(f"the cluster file {path} is not valid JSON ({error}); fix it") from None
        source = str(path)
    if not isinstance(cluster, dict):
        raise TypeError(f"cluster={cluster!r} must be a file path, a dict or a ClusterSpec")
    workers = (cluster.get("cluster") or cluster).get("worker")
    if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
        raise GpkError(
            f"the cluster {source or 'dict'} has no list of worker addresses; "
            'add "worker": ["host1:23456", "host2:23456"]'
        )
    coordinator = cluster.get("coordinator")
    if not isinstance(coordinator, str):
        raise GpkError(
            f"the cluster {source or 'dict'} names no coordinator; add "
            '"coordinator": "host:port", an address of the host that starts the runs'
        )
    key = os.environ.get(KEY_VARIABLE) or str(cluster.get("key") or "")
    return ClusterSpec(tuple(workers), coordinator, key, source)


def split_address(address: str) -> Address:
    """("host", port) from "host:port"; IPv6 hosts in brackets, as gRPC writes them."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GpkError(f"address {address!r} is not host:port; write it like 'node1:23456'")
    return Address(host.strip("[]"), int(port))


def tf_config(workers: tuple[str, ...] | list[str], index: int) -> str:
    """The TF_CONFIG of worker `index`: the whole cluster and this task's place in it."""
    if not 0 <= index < len(workers):
        raise GpkError(
            f"--index {index} is outside the cluster's {len(workers)} workers; "
            f"use 0 to {len(workers) - 1}"
        )
    return json.dumps(
        {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}
    )


def free_loopback_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now: each socket stays open until all are chosen, so no two match."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()


def local_workers(count: int) -> tuple[str, ...]:
    """Addresses for a local cluster of `count` workers on loopback."""
    return tuple(f"{LOOPBACK}:{port}" for port in free_loopback_ports(count))
