"""A cluster of hosts on one machine: N Linux network namespaces, each with an address of its
own on a private bridge, so `mptrain run --hosts` meets a real network (its own interfaces,
routes and a link that can be cut while the process lives), not loopback.

Needs root and `ip netns` (CI runs as root): `NetnsCluster.usable()` says why not, for a skip.
Every namespace, link and process is removed on exit, also when a test fails; the addresses
(10.213.K.0/24) exist only inside the namespaces, and no traffic leaves them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


class NetnsCluster:
    """`with NetnsCluster(2) as cluster:` hosts 0..N-1 at `cluster.address(i)`."""

    def __init__(self, hosts: int, port: int = 23456):
        self.hosts, self.port = hosts, port
        tag = os.getpid() % 250 + 1
        self.subnet = f"10.213.{tag}"
        self.prefix = f"mpt{os.getpid()}"
        self.hub = f"{self.prefix}-hub"
        self.processes: list[subprocess.Popen] = []

    @staticmethod
    def usable() -> str | None:
        """None when namespaces can be made here; else why not."""
        if shutil.which("ip") is None:
            return "no `ip` command (iproute2)"
        if os.geteuid() != 0:
            return "network namespaces need root (CI runs as root)"
        probe = subprocess.run(["ip", "netns", "add", f"mpt-probe-{os.getpid()}"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            return f"`ip netns add` failed: {probe.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", f"mpt-probe-{os.getpid()}"], capture_output=True)
        return None

    def namespace(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def hosts_option(self) -> str:
        """--hosts for every host: address:port of each, worker 0 first."""
        return ",".join(f"{self.address(i)}:{self.port}" for i in range(self.hosts))

    def __enter__(self) -> NetnsCluster:
        try:
            self._ip("netns", "add", self.hub)
            self._ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            self._ip("-n", self.hub, "link", "set", "br0", "up")
            for i in range(self.hosts):
                ns, host_end, hub_end = self.namespace(i), f"{self.prefix}-v{i}", f"{self.prefix}-b{i}"
                self._ip("netns", "add", ns)
                self._ip("link", "add", host_end, "type", "veth", "peer", "name", hub_end)
                self._ip("link", "set", host_end, "netns", ns)
                self._ip("link", "set", hub_end, "netns", self.hub)
                self._ip("-n", self.hub, "link", "set", hub_end, "master", "br0")
                self._ip("-n", self.hub, "link", "set", hub_end, "up")
                self._ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", host_end)
                self._ip("-n", ns, "link", "set", host_end, "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for i in range(self.hosts):  # whatever else runs there, then the namespace and its links
            ns = self.namespace(i)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
            for pid in pids.split():
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.hub], capture_output=True)

    def mptrain(self, i: int, *args: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
        """`mptrain ARGS` on host i (its network only), stdout and stderr captured; `env`:
        variables it gets besides this process's own."""
        env = {**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, **(env or {})}
        process = subprocess.Popen(["ip", "netns", "exec", self.namespace(i), sys.executable, "-m",
                                    "mptrain", *args], cwd=cwd, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.processes.append(process)
        return process

    def cut(self, i: int) -> None:
        """Host i's link goes down; its processes live on (a partition, a pulled cable)."""
        self._ip("-n", self.namespace(i), "link", "set", f"{self.prefix}-v{i}", "down")

    def mend(self, i: int) -> None:
        self._ip("-n", self.namespace(i), "link", "set", f"{self.prefix}-v{i}", "up")

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)
