"""A config error as a person reads it (grid.lines): the file and line that set the key, the nearest valid name."""
from grid.lines import key_line, nearest, with_lines

CONFIG = """grid: demo
recipes: [grpo, sat_gpso]
eval:
  tasks:
    - tiny_test
    - tiny_tset
  k: 4
claims:
  - {name: a, recipe: grpo}
"""


def test_the_line_of_a_key_is_its_values_in_flow_and_block_lists(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    assert key_line(path, "recipes[1]") == 2 and key_line(path, "eval.tasks[1]") == 6
    assert key_line(path, "eval.k") == 7 and key_line(path, "claims[0].recipe") == 9
    assert key_line(path, "eval.kk") == 3  # a key the file does not set: the deepest one it does
    assert key_line(path, "lags") is None and key_line(tmp_path / "none.yaml", "grid") is None


def test_the_nearest_name_is_offered_only_when_close():
    assert nearest("sat_gpso", ["grpo", "sat_gspo", "gspo"]) == " (did you mean sat_gspo?)"
    assert nearest("zzz", ["grpo", "sat_gspo"]) == ""


def test_each_key_line_ends_with_the_last_file_that_sets_it_or_the_command_line(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(CONFIG)
    second.write_text("grid: other\n\nrecipes: [grpo]\n")
    message = "invalid:\n  config key 'recipes[1]': unknown recipe\n  config key 'eval.k': bad\n  config key 'grid': x"
    located = with_lines(message, [first, second], given={"grid"}).splitlines()
    assert located[0] == "invalid:"
    assert located[1].endswith(f"({second}, line 3)")  # b.yaml's list replaces a.yaml's
    assert located[2].endswith(f"({first}, line 7)") and located[3].endswith("(-C grid=...)")
