"""One private SLURM cluster per machine (its config is reached through /etc/slurm/slurm.conf): a
second test suite's cluster waits for the first one's lock instead of failing to start."""
import subprocess
import sys
import time

import pytest

from tests.support.slurm_cluster import machine_lock

HOLD = """import fcntl, sys, time
handle = open(sys.argv[1], "a+")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_second_cluster_waits_for_the_first_to_stop(tmp_path):
    lock = tmp_path / "cluster.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), "4"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        held = time.monotonic()  # the holder sleeps 4 s from here before its exit drops the lock
        with pytest.raises(RuntimeError, match=f"another test cluster held {lock} for 0.5 s"):
            machine_lock(lock, 0.5)
        handle = machine_lock(lock, 60)
        assert time.monotonic() - held >= 3.5, "the lock was taken while the first cluster held it"
        handle.close()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_cluster_is_free(tmp_path):
    lock = tmp_path / "cluster.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), "600"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # kill -9: the kernel drops its lock
    holder.wait()
    machine_lock(lock, 5).close()
