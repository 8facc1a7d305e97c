"""One resolver for every ``_target_`` (train/target.py): Hydra's dotted spelling and the older
``module:name`` give the same object; what cannot be imported says why."""
import pytest

from autotune.train.target import identity, resolve, split


def test_both_spellings_resolve_to_the_same_object():
    import torch

    from autotune.models import bert

    assert resolve("autotune.models.bert:build") is resolve("autotune.models.bert.build") is bert.build
    assert resolve("torch.optim.AdamW") is resolve("torch.optim:AdamW") is torch.optim.AdamW
    assert split("a.b:c") == split("a.b.c") == ("a.b", "c")
    assert identity("a.b:c") == identity("a.b.c") == "a.b:c"  # what a study's setup records


@pytest.mark.parametrize("target, error, words", [
    ("nowhere.module:build", ModuleNotFoundError, "nowhere"),
    ("os", ImportError, "names no module"),
    ("", ValueError, "names nothing"),
    ("autotune.models.bert.nope", AttributeError, "nope"),
])
def test_a_target_that_cannot_be_imported_says_why(target, error, words):
    with pytest.raises(error, match=words):
        resolve(target)
