
from autotune.space import SearchSpace, divisors, load_space, skip_reason
from autotune.strategy import Strategy


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
    space = load_space("search_spaces/default.yaml", problems)
    assert problems == []
    assert space.micro_batches(64) == [4, 8, 16, 32, 64]  # min 4 and max 64 both included
    assert space.micro_batches(16) == [4, 8, 16]
    grid = space.grid(16)
    assert grid == {"checkpointing": ["none", "full"], "precision": ["fp32", "bf16", "fp16"], "micro_batch": [4, 8, 16]}
    for mb in grid["micro_batch"]:
        assert 16 % mb == 0


def test_bounds_are_inclusive_at_both_edges():
    space = SearchSpace(("none",), ("fp32",), 8, 32)
    assert space.micro_batches(64) == [8, 16, 32]
    assert SearchSpace(("none",), ("fp32",), 9, 15).micro_batches(64) == []


def test_every_problem_in_a_space_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, "checkpointing: [none, half]\nprecision: [fp8]\nmicro_batch: {min: 0, max: -1}\noffload: [on]\n")
    problems = []
    assert load_space(path, problems) is None
    text = "\n".join(problems)
    assert "unknown dimension 'offload'" in text
    assert "checkpointing has unknown value(s) ['half']" in text
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
