"""Shared test settings: one CPU thread (the CI machine is shared), a modest hypothesis profile, the
``scratch``, ``base``, ``run_folder`` and ``time_limit`` fixtures, and a check that the suite writes nothing under
the project tree. Shared helpers live in tests/support/."""
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from tests.support import run_folder as run_folders
from tests.support.project_tree import ROOT, is_git_checkout, tree_changes, tree_state
from tests.support.tiny_runs import SMALL

torch.set_num_threads(1)
settings.register_profile("stalebench", max_examples=30, deadline=None, derandomize=True)
settings.load_profile("stalebench")


def pytest_configure(config):
    run_folders.configure(config)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a worker is being started
def pytest_configure_node(node):
    run_folders.give_to_worker(node)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: how the tests are shared out (tests/support/parallel.py)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        from tests.support.parallel import ModuleOrGroup
        return ModuleOrGroup(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the order and groups the tests are sent out in
        from tests.support.parallel import plan
        plan(items, config.stash[run_folders.FOLDER])


def pytest_unconfigure(config):
    run_folders.remove(config)


@pytest.fixture(scope="session")
def run_folder(request):
    """This test run's folder, shared by its xdist workers: for tests.support.run_folder.built_once."""
    return request.config.stash[run_folders.FOLDER]


@pytest.fixture(scope="session", autouse=True)
def project_tree_untouched():
    """Fails the session (an error at its last teardown) if a test wrote into the checkout: tests
    write to temporary folders only, so that concurrent suites and a `snakemake -n` in the checkout
    never see their files."""
    if not is_git_checkout():
        warnings.warn(f"{ROOT} is not a git checkout (a release tarball?): the check that the tests write nothing "
                      "into the project tree compares every file's size and modification time instead of git's view",
                      stacklevel=1)
    before = tree_state()
    yield
    changes = tree_changes(before, tree_state())
    assert not changes, f"the tests (or another process meanwhile) wrote under the project tree: {changes}"


@pytest.fixture
def scratch():
    """A private temporary folder. Not pytest's tmp_path: concurrent pytest sessions on this machine
    prune each other's old base folders, which removed a grid from under a running test."""
    with tempfile.TemporaryDirectory(prefix="stalebench-test-") as path:
        yield Path(path)


@pytest.fixture(scope="module")
def base(tmp_path_factory, run_folder):
    """A tiny-engine base model of tests.support.tiny_runs.SMALL, built once per test run and copied
    for each test module."""
    from engines.tiny.warmstart import build_base  # here: the other test modules need no engine import
    out = tmp_path_factory.mktemp("grid") / "base"
    shutil.copytree(run_folders.built_once(run_folder, "base", lambda folder: build_base(SMALL, folder)), out)
    return out


@pytest.fixture
def time_limit(monkeypatch):
    """harness.engine.watch_time_limit for a test to arm (a fake end time and clock); the module's state
    and SIGURG's handler are put back afterwards."""
    import signal

    from harness import engine

    monkeypatch.setattr(engine, "_LIMIT", engine._LIMIT)
    handler = signal.getsignal(engine.TIME_LIMIT_SIGNAL)
    yield engine.watch_time_limit
    signal.signal(engine.TIME_LIMIT_SIGNAL, handler)
