"""A real Slurm on one machine: Debian's slurmctld, one slurmd per node and munge, each node a
network namespace of its own (`tests.netns`), the controller in another, so `srun` starts
mptrain's tasks as it does on a cluster (its variables, its node list, its signals).

As measured when it was built (slurm-wlm 22.05, munge 0.5.15): about 2 s to bring up. What it
takes, for whoever changes it: slurmd 22.05 loads a cgroup plugin and fails under `ip netns
exec` (which remounts /sys), so each daemon enters only the network namespace (`nsenter
--net`), in a mount namespace of its own whose /etc/hosts names the nodes (the machine's own
file is never touched; the tasks, started by slurmd, inherit it); one munged with its own key
and socket (`AuthInfo=socket=...`); per-node spool, PID and log files (`%n`);
`ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`; ready once `sinfo` shows every
node `idle` (not `idle*`). Everything runs as root (CI does); `SlurmCluster.usable()` says why
not, for a skip. Every daemon, task and namespace is removed on exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.netns import NetnsCluster

DAEMONS = ("slurmctld", "slurmd", "srun", "sinfo", "munged", "nsenter", "unshare")


class SlurmCluster:
    """`with SlurmCluster(2) as slurm:` nodes n1..nN; `slurm.srun(...)` from the controller."""

    def __init__(self, nodes: int = 2):
        self.nodes = nodes
        self.net = NetnsCluster(nodes + 1)  # host 0: the controller; host i: node n{i}
        self.folder = Path(tempfile.mkdtemp(prefix="mptrain-slurm-"))
        self.conf = self.folder / "slurm.conf"
        self.daemons: list[subprocess.Popen] = []

    @staticmethod
    def usable() -> str | None:
        """None when a Slurm can be brought up here; else why not."""
        missing = [name for name in DAEMONS if shutil.which(name) is None]
        if missing:
            return (f"no {', '.join(missing)}: `make install` installs Slurm and munge where apt "
                    "works (apt-get install slurmctld slurmd slurm-client munge)")
        return NetnsCluster.usable()

    def node(self, i: int) -> str:
        return f"n{i}"

    def __enter__(self) -> SlurmCluster:
        self.net.__enter__()
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        folder, net = self.folder, self.net
        os.chmod(folder, 0o755)
        names = ["ctl", *(self.node(i) for i in range(1, self.nodes + 1))]
        (folder / "hosts").write_text("127.0.0.1 localhost\n" + "".join(
            f"{net.address(i)} {name}\n" for i, name in enumerate(names)))
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        for sub in ("state", "spool"):
            (folder / sub).mkdir()
        nodes = "".join(f"NodeName={self.node(i)} NodeAddr={net.address(i)} CPUs={os.cpu_count()} "
                        "State=UNKNOWN\n" for i in range(1, self.nodes + 1))
        self.conf.write_text(
            f"ClusterName=mptrain\nSlurmctldHost=ctl({net.address(0)})\nAuthType=auth/munge\n"
            f"AuthInfo=socket={folder}/munge.socket\nCredType=cred/munge\nSlurmUser=root\n"
            f"SlurmdUser=root\nStateSaveLocation={folder}/state\nSlurmdSpoolDir={folder}/spool/%n\n"
            f"SlurmctldPidFile={folder}/slurmctld.pid\nSlurmdPidFile={folder}/slurmd.%n.pid\n"
            f"SlurmctldLogFile={folder}/slurmctld.log\nSlurmdLogFile={folder}/slurmd.%n.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
            "ReturnToService=2\nSchedulerType=sched/builtin\nSelectType=select/cons_tres\n"
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
            f"{nodes}PartitionName=main Nodes=n[1-{self.nodes}] Default=YES MaxTime=INFINITE "
            "State=UP\n")
        log = open(folder / "daemons.log", "w")  # noqa: SIM115  (closed with the daemons)
        self.daemons.append(subprocess.Popen(
            ["munged", "-F", "--force", f"--key-file={key}", f"--socket={folder}/munge.socket",
             f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
             f"--seed-file={folder}/munged.seed"], stdout=log, stderr=log))
        self._wait(lambda: (folder / "munge.socket").exists(), "munged's socket")
        self.daemons.append(self.inside(0, f"slurmctld -D -c -f {self.conf}", stdout=log, stderr=log))
        for i in range(1, self.nodes + 1):
            self.daemons.append(self.inside(i, f"slurmd -D -N {self.node(i)} -f {self.conf}",
                                            stdout=log, stderr=log))

        def idle() -> bool:
            states = self.inside(0, "sinfo -N -h -o %t", stdout=subprocess.PIPE, text=True,
                                 stderr=subprocess.DEVNULL).communicate(timeout=30)[0].split()
            return states == ["idle"] * self.nodes

        self._wait(idle, "every node idle in sinfo")

    def _wait(self, ready, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                log = (self.folder / "daemons.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Slurm did not come up: no {what} after {timeout:g} s\n{log}")
            time.sleep(0.3)

    def inside(self, i: int, command: str, **popen) -> subprocess.Popen:
        """`command` (a shell line) in host i's network, with the nodes' /etc/hosts and its own
        host name: the controller's (0) or node n{i}'s."""
        name = "ctl" if i == 0 else self.node(i)
        script = (f"mount --bind {self.folder}/hosts /etc/hosts && hostname {name} && "
                  f"exec {command}")
        return subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.net.namespace(i)}", "unshare", "--uts", "--mount",
             "--propagation", "private", "sh", "-c", script],
            env={**os.environ, "SLURM_CONF": str(self.conf), **popen.pop("env", {})}, **popen)

    def srun(self, *args: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
        """`srun ARGS` from the controller, as a batch script runs it (`ARGS` quoted as given)."""
        import shlex

        return self.inside(0, "srun " + " ".join(map(shlex.quote, args)), cwd=cwd, env=env or {},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def pids(self, i: int) -> list[int]:
        """The processes in node n{i}'s network namespace (its slurmd, its tasks)."""
        found = subprocess.run(["ip", "netns", "pids", self.net.namespace(i)], capture_output=True,
                               text=True).stdout
        return [int(pid) for pid in found.split()]

    def __exit__(self, *exc) -> None:
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.terminate()
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.net.__exit__(*exc)  # whatever else runs in the namespaces, then the namespaces
        shutil.rmtree(self.folder, ignore_errors=True)
