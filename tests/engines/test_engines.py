"""The engine interface: one registry, engine packages registered by name, and the house rules
(no engine named in the rule files, analysis/ or tracking/; eval/ only scores). A toy engine added
at run time runs a reduced grid through the real Snakemake."""
from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from grid.config import ConfigError, load
from harness import engine as engines
from harness.io import read_jsonl
from tests.support.workflow_cli import ROOT, job_counts, snakemake


def test_the_registry_knows_both_engines_and_refuses_a_duplicate():
    assert {"tiny", "slime"} <= set(engines.available())
    tiny = engines.get("tiny")
    assert tiny.eval_backend == "tiny" and tiny.prepare_outputs and engines.get("slime").prepare is None
    assert engines.register(tiny) is tiny  # the same object again is not a second definition
    with pytest.raises(ValueError, match="registered twice"):
        engines.register(engines.Engine(name="tiny", resolve_params=dict, train=lambda c, d: "", eval_backend="tiny"))
    with pytest.raises(KeyError, match="unknown engine 'vllm'"):
        engines.get("vllm")
    with pytest.raises(ValueError, match="unknown rule"):
        engines.Engine(name="x", resolve_params=dict, train=lambda c, d: "", eval_backend="tiny",
                       resources={"warmup": {}})


def test_a_loss_metric_cannot_overwrite_an_engine_metric():
    assert engines.merge_metrics({"loss": 1.0}, {"sat/q": 0.1}) == {"loss": 1.0, "sat/q": 0.1}
    with pytest.raises(ValueError, match=r"\['loss'\] collide"):
        engines.merge_metrics({"loss": 1.0, "reward": 0.5}, {"loss": 2.0})


def test_the_config_schema_reads_the_engine_list_from_the_registry():
    with pytest.raises(ConfigError, match="config key 'engine': 'toy' is not one of"):
        load(ROOT / "config.yaml", {"engine": "toy"})


def _names_in(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(tiny|slime)\b", line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_engine_is_named_in_the_rules_analysis_or_tracking():
    paths = [*ROOT.glob("workflow/rules/*.smk"), *ROOT.glob("analysis/*.py"), *ROOT.glob("tracking/*.py")]
    assert paths and _names_in(paths) == []


def _raw_config_reads(path: Path) -> list[str]:
    """``config[...]``, ``config.get(...)`` and a ``config`` parameter not annotated Config, with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        named = None
        if isinstance(node, ast.Subscript):
            named = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            named = node.func.value
        if named is not None and {getattr(named, "id", None), getattr(named, "attr", None)} & {"config", "run_config"}:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.arg) and node.arg == "config" and ast.unparse(node.annotation or ast.Name("?")) != "Config":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: parameter config: {ast.unparse(node.annotation or ast.Name('?'))}")
    return found


def test_analysis_and_tracking_read_the_typed_config_never_a_raw_dict():
    """A stage loads the checked config once (grid.settings.Config) and passes it on typed: a raw
    dict read there is a setting that no schema field documents and no stage's inputs name. A run's own
    config.json is read as harness.run_config.PinnedRun, not as a dict (``run_config[...]``)."""
    paths = [*ROOT.glob("analysis/**/*.py"), *ROOT.glob("tracking/**/*.py")]
    assert paths and [read for path in paths for read in _raw_config_reads(path)] == []


SUMMARY_EDGE = "analysis/claims/summary_file.py"  # the one module that writes and reads summary.json
FILE_CALLS = {"read_json", "write_json_atomic", "write_text_atomic", "loads", "read_text", "open"}


def _untyped_results(path: Path) -> list[str]:
    """A claim kind looked up again (``KINDS[...]``: a verdict carries its Claim), and summary.json read or
    written past its edge (a file call on a ``summary_path``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}"
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "KINDS":
            found.append(where)
        if not isinstance(node, ast.Call) or str(path.relative_to(ROOT)) == SUMMARY_EDGE:
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", None))
        touches = {getattr(n, "attr", getattr(n, "id", None)) for arg in [node.func, *node.args] for n in ast.walk(arg)}
        if name in FILE_CALLS and "summary_path" in touches:
            found.append(where)
    return found


def test_results_are_typed_from_the_verdict_to_the_report():
    """A claim after its verdict is an analysis.claims.verdict.Verdict carrying its Claim, so nothing in
    analysis/ or tracking/ looks its kind up again; summary.json is written and read back at one edge
    (analysis.claims.summary_file), whose reader gives the claims as verdicts again."""
    paths = [*ROOT.glob("analysis/**/*.py"), *ROOT.glob("tracking/**/*.py")]
    assert (ROOT / SUMMARY_EDGE).exists() and [hit for path in paths for hit in _untyped_results(path)] == []


# String-key reads (x["k"], x.get("k")) per module of analysis/ and tracking/, at most these; every other module 0.
# Cells are typed (analysis.statistics.cell_stats, cell_table), so none reads a cell row; what is left reads JSON at
# its own edge (run files, tuning.json, the look-levels cache, MLflow's), or a section summary.json still holds as
# a dict (noise, pareto, gain sources, tuning) and the planner's rows. A module under
# its ceiling lowers it; none goes over (issue 60: 878 reads, 617, now 373).
KEY_READ_CEILINGS = {
    "analysis/cells/curves.py": 6, "analysis/cells/noise.py": 6, "analysis/cells/pareto.py": 6,
    "analysis/cells/reference.py": 8, "analysis/cells/summary.py": 6, "analysis/claims/design_search.py": 21,
    "analysis/claims/gain_sources.py": 4, "analysis/claims/planning.py": 15, "analysis/claims/robustness.py": 24,
    "analysis/claims/summary_file.py": 3, "analysis/claims/verdicts.py": 12, "analysis/report/compare.py": 4,
    "analysis/report/machines.py": 17, "analysis/report/plots.py": 18, "analysis/report/sections.py": 102,
    "analysis/report/tables.py": 9, "analysis/report/write.py": 1, "analysis/schedule/levels_cache.py": 6,
    "analysis/schedule/looks.py": 2, "analysis/schedule/rerun.py": 24, "analysis/schedule/tune.py": 6,
    "analysis/statistics/boundaries.py": 7, "analysis/statistics/noise_parts.py": 5, "tracking/layout.py": 12,
    "tracking/parent.py": 9, "tracking/runs.py": 20, "tracking/store.py": 3, "tracking/sync.py": 16,
    "tracking/ui.py": 1,
}


def _key_reads(path: Path) -> list[tuple[int, str]]:
    """(line, key) of each string-key read of the module: ``x["k"]`` read (not written), ``x.get("k")``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            key = node.args[0]
        else:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((node.lineno, key.value))
    return found


def test_results_read_no_string_keys_past_their_edges():
    """No module of analysis/ or tracking/ reads more string keys than its ceiling (KEY_READ_CEILINGS), and none
    reads a cell as a dict: a cell row is written and read at summary.json's edge only (CellStats)."""
    reads = {str(path.relative_to(ROOT)): _key_reads(path)
             for path in [*ROOT.glob("analysis/**/*.py"), *ROOT.glob("tracking/**/*.py")]}
    over = {module: (len(found), KEY_READ_CEILINGS.get(module, 0)) for module, found in reads.items()
            if len(found) > KEY_READ_CEILINGS.get(module, 0)}
    assert over == {}, f"string-key reads over the ceiling (reads, ceiling): {over}"
    cell_keys = {"per_seed", "stats", "curve", "run_keys", "staleness_cost", "vs_baseline", "collapse_vs_baseline"}
    assert [f"{module}:{line} [{key!r}]" for module, found in reads.items() for line, key in found if key in cell_keys] == []


def _imports(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("stage", ["analysis", "tracking", "harness", "stabilizers"])
def test_stages_import_no_engine_internals(stage):
    """Data flows one way; a later stage may use the engine registry (harness.engine), never an engine."""
    for path in (ROOT / stage).rglob("*.py"):
        internals = {m for m in _imports(path) if m.startswith("engines.")
                     or (stage == "harness" and m == "engines")}  # harness finds the engines by importlib
        assert not internals, f"{path.relative_to(ROOT)} imports {internals}"
    if stage == "stabilizers":
        assert not any(m.split(".")[0] in {"engines", "harness", "eval", "analysis", "tracking"}
                       for path in (ROOT / stage).glob("*.py") for m in _imports(path))


def test_harness_is_the_contracts_and_grid_sits_above_it():
    """harness/ holds what every stage shares and imports nothing of grid/ (what a config declares);
    among the engines only the slime planner reads a grid's config; one class per name across both."""
    for path in (ROOT / "harness").glob("*.py"):
        assert not {m for m in _imports(path) if m.split(".")[0] in {"grid", "analysis", "tracking", "eval"}}, path
    readers = {str(path.relative_to(ROOT)) for path in (ROOT / "engines").rglob("*.py")
               if any(m.split(".")[0] == "grid" for m in _imports(path))}
    assert readers <= {"engines/slime/plan.py", "engines/slime/launch.py"}, readers
    classes = [node.name for folder in ("harness", "grid") for path in (ROOT / folder).glob("*.py")
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]
    assert sorted(name for name in set(classes) if classes.count(name) > 1) == []


def test_every_module_fits_in_one_sitting():
    """No source module over 350 lines (the project's limit: a module is read in one sitting)."""
    folders = ("harness", "grid", "engines", "eval", "analysis", "tracking", "stabilizers", "stalebench")
    long = {str(path.relative_to(ROOT)): n for folder in folders for path in (ROOT / folder).rglob("*.py")
            if (n := len(path.read_text().splitlines())) > 350}
    assert long == {}


ANALYSIS_ROOMS = ("statistics", "claims", "cells", "schedule", "report")  # docs/design.md, the folder table


def test_each_analysis_room_imports_only_the_rooms_before_it():
    """analysis/ by role: statistics/ reads arrays and no config; every room imports only the rooms
    listed before it, so nothing imports back up."""
    for index, room in enumerate(ANALYSIS_ROOMS):
        for path in (ROOT / "analysis" / room).glob("*.py"):
            tree = ast.parse(path.read_text())
            named = {f"{node.module}.{alias.name}" for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
            rooms = {m.split(".")[1] for m in _imports(path) | named if m.startswith("analysis.")}
            assert rooms <= set(ANALYSIS_ROOMS[:index + 1]), f"{path.relative_to(ROOT)} imports analysis rooms {rooms}"
            if room == "statistics":
                assert not {m for m in _imports(path) if m.split(".")[0] in {"harness", "tracking"}}, path


def test_eval_holds_only_scoring():
    assert sorted(p.name for p in (ROOT / "eval").glob("*.py")) == [
        "__init__.py", "answers.py", "lm_model.py", "score.py", "server.py"]


TOY_ENGINE = '''
"""A toy engine for the registry test: the tiny engine's training under another name, with
its own default resources and a marker in every run directory."""
from pathlib import Path

from harness.engine import Engine, get, register

tiny = get("tiny")


def train(run_config, run_dir):
    (run_dir.path / "trained_by_toy").write_text(run_config.engine.name)
    return tiny.train(run_config, run_dir)


register(Engine(name="toy", resolve_params=tiny.resolve_params, train=train, eval_backend="tiny",
                check_run=tiny.check_run, prepare=tiny.prepare, prepare_outputs=tiny.prepare_outputs,
                prepare_keys=tiny.prepare_keys,
                resources={"train": {"threads": 1, "mem_mb": 321}}))
'''


@pytest.mark.slow  # Snakemake
def test_a_toy_engine_added_at_run_time_runs_a_grid_through_snakemake(scratch):
    (scratch / "plugins").mkdir()
    (scratch / "plugins" / "toy_engine.py").write_text(textwrap.dedent(TOY_ENGINE))
    env = {**os.environ, "STALEBENCH_ENGINES": "toy_engine",
           "PYTHONPATH": os.pathsep.join([str(scratch / "plugins"), str(ROOT)])}
    overrides = {"engine": "toy", "grid": "toy", "recipes": ["grpo"], "lags": [2], "seeds": [0], "steps": 4, "claims": [],
                 "eval_every": 2, "baseline": "grpo",
                 "engine_params": {"preset": "demo", "width": 32, "heads": 2, "expert_hidden": 32,
                                   "warmstart_steps": 10, "prompts_per_step": 4, "samples_per_step": 4},
                 "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 16}}}
    args = ["-c1", "-C", f"results_dir={scratch / 'results'}",
            *(f"{key}={json.dumps(value)}" for key, value in overrides.items())]
    dry = snakemake("-n", *args, env=env, timeout=300)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "mem_mb=321" in dry.stdout  # the toy engine's own resources reach its train job
    result = snakemake(*args, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert job_counts(result.stdout + result.stderr) == {"grid_config": 1, "prepare": 1, "train": 1, "evaluate": 1,
                                                         "aggregate": 1, "track": 1, "all": 1}
    run = scratch / "results" / "toy" / "runs" / "grpo" / "lag2" / "seed0"
    assert (run / "trained_by_toy").read_text() == "toy"
    assert json.loads((run / "config.json").read_text())["engine"] == "toy"
    assert [row["step"] for row in read_jsonl(run / "eval" / "tiny_test.jsonl")] == [2, 4]
    assert (scratch / "results" / "toy" / "table.md").is_file()


def test_only_harness_run_spells_a_run_folders_file_names():
    """Every stage reads and writes a run through harness.run.RunDir (docs/design.md, "The house")."""
    sources = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".smk") or p.name in ("Snakefile", "Makefile")]
    sources = [p for p in sources if not p.relative_to(ROOT).parts[0].startswith((".", "tests"))]
    spelled = sorted(str(p.relative_to(ROOT)) for p in sources if p.is_file()
                     and any(name in p.read_text() for name in ("status.json", "metrics.jsonl")))
    assert spelled == ["harness/run.py"]
