"""A private single-node SLURM cluster on localhost for the tests (Debian's slurm-wlm + munge).

    cluster = SlurmCluster(root).start()   # munged, slurmctld, slurmd: own config, ports, socket
    cluster.env                            # environment for sbatch/squeue/scancel/snakemake
    cluster.proctrack                      # the ProctrackType it runs (and cluster.proctrack_note: why)
    cluster.stop()                         # stops the daemons it started, by their pids

    python -m tests.support.slurm_cluster install   # slurm-wlm + munge with apt-get (root), before
                                                    # the tests: not inside a test's time limit

The munge key, socket, spool and state directories, logs and slurm.conf live under ``root``, the
ports are free ones picked at start (picked again if a daemon finds its port taken meanwhile), and
no accounting daemon runs (the executor plugin then polls
``squeue``, which needs MinJobAge >= 120 s). One system-wide trace: /etc/slurm/slurm.conf is a
symlink to the private config while the cluster runs, because the executor plugin's job step
drops $SLURM_CONF before it calls srun. So one test cluster runs per machine at a time: a second one
(a concurrent test suite) waits for the machine-wide lock CLUSTER_LOCK that the first holds until it
stops (released by the kernel if its process dies); a config there without that lock held (a real
cluster) is left alone and the cluster refuses to start.
Two partitions on the one node: ``cpu`` (default) and ``gpu``.

Process tracking as real GPU sites run it: ``proctrack/cgroup`` (SchedMD's recommendation; SLURM's
time-limit warning then reaches only a job step's direct child) where this machine's kernel and
mounts let slurmd use it, which a probe job step decides; else ``proctrack/linuxproc`` (every process
of the step is signalled), with the reason in ``proctrack_note``. The tests print which ran.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.ports import free_ports

PACKAGES = ("slurm-wlm", "munge")
CGROUP, LINUXPROC = "proctrack/cgroup", "proctrack/linuxproc"
# no constraints: the test jobs share one node's cores and memory; only the process tracking is wanted
CGROUP_CONF = "CgroupPlugin=autodetect\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
CLUSTER_LOCK = Path(tempfile.gettempdir()) / "stalebench-slurm-cluster.lock"


def missing_binaries() -> list[str]:
    return [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def unavailable_reason() -> str | None:
    """None when SLURM's programs are installed and a cluster can start here, else why not."""
    if os.geteuid() != 0:
        return "a private SLURM cluster needs root (its daemons run as SlurmUser=root)"
    if missing_binaries():
        return (f"SLURM is not installed ({', '.join(missing_binaries())} missing): "
                "run `python -m tests.support.slurm_cluster install` (root + apt-get) first")
    return None


def install() -> None:
    """Install the packages with apt-get when a program is missing; raises naming what failed."""
    if not missing_binaries():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]):
        subprocess.run(command, env=env, check=True)
    if missing_binaries():
        raise RuntimeError(f"installed {PACKAGES} but {missing_binaries()} are still missing")


def machine_lock(path: Path, timeout: float):
    """The open file holding an exclusive lock on ``path``, waited for up to ``timeout`` seconds."""
    handle = open(path, "a+")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise RuntimeError(f"another test cluster held {path} for {timeout:g} s: not starting one") from None
            time.sleep(1)


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SlurmCluster:
    def __init__(self, root: str | Path, *, cpus: int | None = None, memory_mb: int = 8000,
                 min_job_age: int = 120):
        self.root = Path(root)
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mb = memory_mb
        self.min_job_age = min_job_age
        self.conf = self.root / "slurm.conf"
        self.proctrack, self.proctrack_note = CGROUP, ""
        self.processes: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        self.root.chmod(0o755)  # munged wants its socket's directory searchable by all
        for name in ("spool", "state", "log"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        ctld_port, slurmd_port = free_ports(2)
        host = socket.gethostname().split(".")[0]
        node = (f"NodeName=localhost NodeHostname={host} NodeAddr=127.0.0.1 Port={slurmd_port} "
                f"CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN")
        self.conf.write_text("\n".join([
            "ClusterName=stalebench-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.root / 'munge.sock'}",
            f"ProctrackType={self.proctrack}",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "MpiDefault=none",
            "ReturnToService=2",
            # speed: schedule at submit and every second; finished jobs stay visible to squeue for
            # MinJobAge seconds (the plugin's squeue status needs >= 3 x its first-check delay)
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=1",
            f"MinJobAge={self.min_job_age}",
            "KillWait=5",
            "OverTimeLimit=0",
            "InactiveLimit=0",
            "MessageTimeout=10",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            node,
            "PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            "PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP",
        ]) + "\n")

    def write_cgroup_config(self) -> None:
        (self.root / "cgroup.conf").write_text(CGROUP_CONF)  # read from slurm.conf's folder

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        self.processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                start_new_session=True)

    def start(self, timeout: float = 60, attempts: int = 3, wait: float = 0) -> "SlurmCluster":
        """Start the daemons once no other test cluster runs here (waiting up to ``wait`` seconds for
        one to stop); where a daemon exits because another process took its port between the pick
        and its bind, start again on new ports (up to ``attempts`` times)."""
        self.lock = machine_lock(CLUSTER_LOCK, wait)
        try:
            if SYSTEM_CONF.exists() or SYSTEM_CONF.is_symlink():
                raise RuntimeError(f"{SYSTEM_CONF} exists and no test cluster holds {CLUSTER_LOCK}: a real "
                                   "cluster, or a symlink left by a test cluster killed before it could remove "
                                   "it: not starting one")
            for _ in range(attempts - 1):
                try:
                    return self._started(timeout)
                except RuntimeError:
                    if "Address already in use" not in self.logs():
                        raise
            return self._started(timeout)
        except BaseException:
            self.lock.close()
            raise

    def _started(self, timeout: float) -> "SlurmCluster":
        """The daemons with proctrack/cgroup where a probe job step runs under it, else with linuxproc."""
        self.proctrack = CGROUP
        try:
            self._start_daemons(timeout)
            problem = self._probe()
        except RuntimeError as error:
            if "Address already in use" in self.logs():
                self._stop_daemons()
                raise
            problem = str(error)[-1500:]
        except BaseException:
            self._stop_daemons()
            raise
        if problem is None:
            self.proctrack_note = "a probe job step ran under proctrack/cgroup"
            return self
        self._stop_daemons()
        self.proctrack, self.proctrack_note = LINUXPROC, f"proctrack/cgroup did not run here: {problem}"
        try:
            self._start_daemons(timeout)
        except BaseException:
            self._stop_daemons()
            raise
        return self

    def _probe(self) -> str | None:
        """None when a job step runs on the node, else what went wrong (its output and slurmd's log)."""
        try:
            probe = subprocess.run(["srun", "-n1", "-t", "1", "true"], env=self.env, capture_output=True, text=True,
                                   timeout=90)
        except subprocess.TimeoutExpired:
            return f"a probe job step (srun true) did not end in 90 s; {self.logs()[-1000:]}"
        return None if probe.returncode == 0 else f"srun true: {probe.stderr.strip()[-500:]}; {self.logs()[-1000:]}"

    def _start_daemons(self, timeout: float) -> None:
        shutil.rmtree(self.root / "log", ignore_errors=True)  # a new attempt's logs only
        (self.root / "munge.sock").unlink(missing_ok=True)  # waited for below: not an old attempt's
        self.write_config()
        self.write_cgroup_config()
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SYSTEM_CONF.symlink_to(self.conf)
        key = self.root / "munge.key"
        key.unlink(missing_ok=True)
        subprocess.run([_sbin("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
        key.chmod(0o600)
        self._start("munged", [_sbin("munged"), "--foreground", "--force", f"--socket={self.root / 'munge.sock'}",
                               f"--key-file={key}", f"--pid-file={self.root / 'munged.pid'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}",
                               f"--seed-file={self.root / 'munged.seed'}"])
        self._wait(lambda: (self.root / "munge.sock").exists(), timeout, "munged's socket")
        self._start("slurmctld", [_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._run(["scontrol", "ping"]).returncode == 0 and "UP" in self._run(
            ["scontrol", "ping"]).stdout, timeout, "slurmctld (scontrol ping)")
        self._start("slurmd", [_sbin("slurmd"), "-D", "-f", str(self.conf)])
        self._wait(lambda: self._run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.strip().split("\n")[0]
                   in ("idle", "mix", "alloc"), timeout, "the node to be idle (sinfo)")

    def _run(self, command: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [name for name, proc in self.processes.items() if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited while waiting for {what}; logs: {self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}; logs: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text()[-2000:]}"
                         for path in sorted((self.root / "log").glob("*")) if path.is_file())

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return self._run(["scontrol", *args])

    def squeue(self, *fields: str) -> list[list[str]]:
        """Every job slurmctld still knows (any state), as rows of the given squeue format fields."""
        out = self._run(["squeue", "--states=all", "-h", "-o", "|".join(fields)]).stdout
        return [line.split("|") for line in out.splitlines() if line]

    def stop(self) -> None:
        """Cancel the jobs left on this private cluster, stop the daemons this object started (by
        pid), newest first, remove the symlink it made, and let the next test cluster start."""
        self._stop_daemons()
        self.lock.close()

    def _stop_daemons(self) -> None:
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            jobs = [row[0] for row in self.squeue("%i", "%T") if row[1] in ("PENDING", "RUNNING", "COMPLETING")]
            if jobs:
                self._run(["scancel", *jobs])
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and any(
                        row[1] in ("PENDING", "RUNNING", "COMPLETING") for row in self.squeue("%i", "%T")):
                    time.sleep(1)
        if SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == self.conf.resolve():
            SYSTEM_CONF.unlink()
        for name in reversed(list(self.processes)):
            proc = self.processes.pop(name)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.support.slurm_cluster install")
    install()
