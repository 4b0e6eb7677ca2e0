"""`make setup` (envs/setup_venv.py): which installer and which torch source it chooses on which machine."""
import tomllib
from pathlib import Path

from envs.setup_venv import CPU_INDEX, ROOT, install_steps, pip_sources

VENV = Path("/v")
# `pip config list` on a machine with a local mirror and a wheel folder (the folder named twice: file and env)
PIP_CONFIG = """global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
:env:.find-links='/opt/wheels'
"""


def test_pip_sources_become_uv_options_once_each():
    assert pip_sources(PIP_CONFIG) == ["--extra-index-url", "file:///opt/pypi/simple",
                                       "--extra-index-url", "file:///opt/pypi-more/simple",
                                       "--find-links", "/opt/wheels", "--index-strategy", "unsafe-best-match"]
    assert pip_sources("global.cert='/x'\n") == []


def test_torch_comes_from_the_cpu_index_only_without_a_gpu_and_with_the_index_reachable():
    (cpu,), why = install_steps(VENV, uv=True, gpu=False, index_error=None, torch="torch==2.13.0", pip_config="")
    assert cpu[:3] == ["/v/bin/uv", "pip", "install"] and "--no-sources" not in cpu and CPU_INDEX in why
    (offline,), why = install_steps(VENV, uv=True, gpu=False, index_error="dns error", torch="torch==2.13.0",
                                    pip_config=PIP_CONFIG)
    assert "--no-sources" in offline and "/opt/wheels" in offline and "dns error" in why
    (gpu,), why = install_steps(VENV, uv=True, gpu=True, index_error=None, torch="torch==2.13.0", pip_config="")
    assert "--no-sources" in gpu and "CUDA" in why


def test_pip_does_every_step_where_uv_is_missing():
    steps, _ = install_steps(VENV, uv=False, gpu=False, index_error=None, torch="torch==2.13.0", pip_config="")
    assert all(step[0] == "/v/bin/pip" for step in steps)
    assert steps[1][-3:] == ["--index-url", CPU_INDEX, "torch==2.13.0"]
    steps, _ = install_steps(VENV, uv=False, gpu=True, index_error=None, torch="torch==2.13.0", pip_config="")
    assert CPU_INDEX not in steps[1]


def test_pyproject_names_the_same_cpu_index_for_torch_alone():
    uv = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]
    (index,) = uv["index"]
    assert (index["url"], index["explicit"]) == (CPU_INDEX, True)
    assert uv["sources"] == {"torch": [{"index": index["name"]}]}


def test_every_installer_compiles_the_bytecode_at_setup():
    """uv compiles only when asked, pip unless told not to: each job then reads the compiled modules
    instead of recompiling torch and lm-eval (under PYTHONDONTWRITEBYTECODE it never caches them)."""
    for gpu in (False, True):
        (uv,), _ = install_steps(VENV, uv=True, gpu=gpu, index_error=None, torch="torch==2.13.0", pip_config="")
        assert "--compile-bytecode" in uv
        steps, _ = install_steps(VENV, uv=False, gpu=gpu, index_error=None, torch="torch==2.13.0", pip_config="")
        assert not any("--no-compile" in step for step in steps)
