
import yaml

from autotune.search.space import SHIPPED_DIR, SearchSpace, divisors, skip_reason
from autotune.search.space import load_space as load_group
from autotune.train.strategy import Strategy


def load_space(path, problems):
    """A space file of the user's own, as search_space.path=PATH gives it."""
    return load_group({"name": "default", "path": path}, problems)


def write(tmp_path, text):
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return str(p)


def test_divisors():
    assert divisors(64) == [1, 2, 4, 8, 16, 32, 64]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(0) == []


def test_default_space_enumerates_divisors_within_inclusive_bounds():
    problems = []
    space = load_group(yaml.safe_load((SHIPPED_DIR / "default.yaml").read_text()), problems)
    assert problems == []
    assert space.micro_batches(64) == [4, 8, 16, 32, 64]  # min 4 and max 64 both included
    assert space.micro_batches(16) == [4, 8, 16]
    grid = space.grid(16)
    assert grid == {"checkpointing": ["none", "0.5", "full"], "precision": ["fp32", "bf16", "fp16"],
                    "micro_batch": [4, 8, 16], "offload": [False], "allocator": ["default"]}
    for mb in grid["micro_batch"]:
        assert 16 % mb == 0


def test_bounds_are_inclusive_at_both_edges():
    space = SearchSpace({"checkpointing": ("none",), "precision": ("fp32",)}, 8, 32)
    assert space.micro_batches(64) == [8, 16, 32]
    assert SearchSpace({"checkpointing": ("none",), "precision": ("fp32",)}, 9, 15).micro_batches(64) == []


def test_every_problem_in_a_space_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, "checkpointing: [none, half, 1.5]\nprecision: [fp8]\nmicro_batch: {min: 0, max: -1}\n"
                           "offload: [maybe]\nallocator: [huge]\npin_memory: [true]\n")
    problems = []
    assert load_space(path, problems) is None
    text = "\n".join(problems)
    assert "unknown dimension 'pin_memory'" in text
    assert "checkpointing value 'half': use none, full or a fraction of the blocks in [0, 1]" in text
    assert "checkpointing value 1.5: use none, full or a fraction" in text
    assert "offload has unknown value(s) ['maybe']" in text
    assert "allocator has unknown value(s) ['huge']; use values from ['default', 'expandable']" in text
    assert "precision has unknown value(s) ['fp8']" in text
    assert "micro_batch.min=0 must be an integer >= 1" in text


def test_min_above_max_and_missing_file(tmp_path):
    problems = []
    load_space(write(tmp_path, "checkpointing: [none]\nprecision: [fp32]\nmicro_batch: {min: 8, max: 2}\n"), problems)
    assert problems == ["space.yaml: micro_batch.min=8 is above micro_batch.max=2; swap them"]
    problems = []
    assert load_space(str(tmp_path / "nope.yaml"), problems) is None
    assert "no such file" in problems[0] and "search_space.path=" in problems[0]


def test_skip_reason_names_unsupported_precision():
    s = Strategy("none", "bf16", 4, 4)
    assert skip_reason(s, ("fp32",), {"bf16": "no bf16 here"}) == "no bf16 here"
    assert skip_reason(s, ("fp32", "bf16"), {}) is None


def test_fractions_and_aliases_give_one_spelling_each(tmp_path):
    problems = []
    space = load_space(write(tmp_path, "checkpointing: [0, none, 0.25, 0.5, 1, full]\nprecision: [bf16]\n"
                                       "micro_batch: {min: 1, max: 2}\noffload: [false, true]\n"), problems)
    assert problems == []
    assert space["checkpointing"] == ("none", "0.25", "0.5", "full")
    assert space["offload"] == (False, True) and space["allocator"] == ("default",)


def test_cpu_runs_skip_offload_and_allocator_settings():
    assert "nothing to move" in skip_reason(Strategy("none", "fp32", 4, 1, offload=True), ("fp32",), {}, "cpu")
    assert "caching allocator" in skip_reason(
        Strategy("none", "fp32", 4, 1, allocator="expandable"), ("fp32",), {}, "cpu"
    )
    assert (
        skip_reason(Strategy("0.5", "fp32", 4, 1, offload=True, allocator="expandable"), ("fp32",), {}, "cuda") is None
    )


def test_every_shipped_space_is_clean_and_a_bad_group_value_is_reported_with_the_rest():
    for file in sorted(SHIPPED_DIR.glob("*.yaml")):
        problems = []
        assert load_group(yaml.safe_load(file.read_text()), problems) is not None and problems == [], file
    problems = []
    group = {
        "name": "default",
        "checkpointing": ["none", 2.0],
        "precision": ["fp8"],
        "micro_batch": {"min": 4, "max": 64},
        "offload": [False],
        "allocator": ["default"],
        "path": None,
    }
    assert load_group(group, problems) is None
    assert problems == ["search_space=default: checkpointing value 2.0: use none, full or a fraction of the blocks "
                        "in [0, 1], e.g. 0.5",
                        "search_space=default: precision has unknown value(s) ['fp8']; use values from "
                        "['fp32', 'bf16', 'fp16']"]
