"""The test run's shared folder (tests/support/run_folder.py): a run killed by SIGKILL leaves its folder, and
the next run's starting process removes it, never the folder of a run still going."""
import os
import subprocess
import sys

from tests.support.run_folder import PREFIX, remove_orphans


def test_only_the_folders_of_runs_whose_process_is_gone_are_removed(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{PREFIX}{gone.stdout.strip()}-abc"
    alive = tmp_path / f"{PREFIX}{os.getpid()}-def"
    init = tmp_path / f"{PREFIX}1-ghi"  # PID 1 lives (and as another user's, os.kill refuses it): it stays
    unnamed = tmp_path / f"{PREFIX}xyz"  # an older run's name, without a process id
    for folder in (dead, alive, init, unnamed):
        (folder / "base").mkdir(parents=True)
    assert remove_orphans(tmp_path) == [dead]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(p.name for p in (alive, init, unnamed))
