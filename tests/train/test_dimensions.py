"""Each strategy dimension is declared once (autotune/train/dimensions.py) and everything
that lists dimensions derives the list from the declarations."""
import ast
from pathlib import Path

import pytest
import yaml

from autotune.search.auto import Family, no_lighter, no_slower
from autotune.search.space import SearchSpace, canonical, check_space
from autotune.study.config import SearchSpaceConfig
from autotune.train.best_schema import TunedStrategy
from autotune.train.dimensions import DIMENSIONS, MODEL_STATE, Dimension, declare, defaults, in_group, short_label
from autotune.train.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2] / "autotune"


def _hand_written_lists(path: Path, names: set) -> list:
    """Literal tuples, lists, sets, dict keys and class fields naming four or more dimensions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.Dict):
            elts = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        elif isinstance(node, ast.ClassDef):
            elts = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        else:
            continue
        named = sorted(names & set(elts))
        if len(named) >= 4:
            found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {named}")
    return found


def test_no_module_writes_out_a_list_of_dimensions():
    names = set(DIMENSIONS)
    found = [hit for p in sorted(ROOT.rglob("*.py")) if p.name != "dimensions.py"
             for hit in _hand_written_lists(p, names)]
    assert found == [], "derive these from autotune.train.dimensions.DIMENSIONS"
    # the check itself finds what it is for
    probe = Path(__file__).with_name("_probe_list.py")
    try:
        probe.write_text('KEYS = ("checkpointing", "precision", "offload", "allocator")\n')
        assert _hand_written_lists(probe, names)
    finally:
        probe.unlink()


def test_the_schemas_and_the_space_derive_from_the_declarations():
    searched = [d.name for d in DIMENSIONS.values() if d.searched]
    assert [f for f in SearchSpaceConfig.__dataclass_fields__ if f not in ("name", "path")] == searched
    assert list(TunedStrategy.__dataclass_fields__) == list(DIMENSIONS)
    assert list(Strategy().as_dict()) == list(DIMENSIONS)
    assert set(SearchSpace().choices) == set(searched) - {"micro_batch"}
    assert defaults(MODEL_STATE) == {d.name: d.default for d in in_group(MODEL_STATE)}


def test_a_strategy_checks_every_value_and_spells_it_once():
    s = Strategy(checkpointing=0.5, precision="bf16", micro_batch=8, accumulation=4, offload=True)
    assert s.checkpointing == "0.5" and s.allocator == "default" and s.global_batch == 32
    assert s.label() == "ckpt=0.5 prec=bf16 mb=8 acc=4 offload"
    assert short_label(s.as_dict()) == "0.5/bf16/mb8x4 + offload"
    assert s == Strategy.of({**s.as_dict(), "offload": 1.0}) and hash(s) == hash(s.replace())
    with pytest.raises(ValueError, match=r"optimizer_state='2bit': use one of default, 8bit, 4bit"):
        Strategy(optimizer_state="2bit")
    with pytest.raises(ValueError, match=r"offload='false': must be true or false"):
        Strategy(offload="false")
    with pytest.raises(TypeError, match=r"unknown strategy dimension\(s\) checkpoint"):
        Strategy(checkpoint="full")
    with pytest.raises(AttributeError, match="immutable"):
        s.precision = "fp32"


def test_a_declaration_is_checked():
    with pytest.raises(ValueError, match="declared twice"):
        declare(Dimension("precision", "fp32", ("fp32",)))
    with pytest.raises(ValueError, match="not among its values"):
        declare(Dimension("toy_check", "c", ("a", "b")))
    assert "toy_check" not in DIMENSIONS


def test_the_search_orders_come_from_the_declarations():
    plain = Family(0.0, "fp32", False, "default", "default", False, "fp32", "default")
    full = plain._replace(checkpointing=1.0)
    state8 = plain._replace(optimizer_state="8bit")
    assert no_lighter(plain, full) and not no_lighter(full, plain)  # fact 7: less checkpointing holds more
    assert no_lighter(plain, state8) and not no_lighter(state8, plain)
    assert not no_lighter(plain, plain._replace(precision="bf16"))  # no order: only equal values compare
    assert no_slower(plain, full) and not no_slower(full, plain)  # fact 3
    assert no_slower(plain, plain._replace(offload=True))
    assert not no_slower(full._replace(offload=True), plain._replace(offload=True))  # offload bounds only itself


def test_a_space_lists_a_group_not_always_keyed_only_where_it_varies():
    problems = []
    space = check_space(yaml.safe_load("checkpointing: [none]\nprecision: [fp32]\nmicro_batch: {min: 1, max: 2}\n"),
                        "s", problems)
    assert problems == [] and space.activation_only
    assert set(space.grid(2)) == {"checkpointing", "precision", "micro_batch", "offload", "allocator"}
    wider = check_space({"checkpointing": ["none"], "precision": ["fp32"], "micro_batch": {"min": 1, "max": 2},
                         "weights": ["fp32", "bf16"]}, "s", problems)
    assert problems == [] and set(wider.grid(2)) == set(space.grid(2)) | {d.name for d in in_group(MODEL_STATE)}
    config = {"checkpointing": "none", "precision": "fp32", "micro_batch": 2, "offload": False,
              "allocator": "default"}
    assert canonical({**config, **defaults(MODEL_STATE)}) == config
    assert canonical({**config, "weights": "bf16"}) == {**config, **defaults(MODEL_STATE), "weights": "bf16"}
