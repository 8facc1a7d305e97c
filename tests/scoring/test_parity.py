"""Loss parity on the curves a real run produced: 4-bit AdamW against the plain optimizer on
the 1.1B Llama (experiment=llama_1b_16gib, full checkpointing, micro-batch 8, H100)."""
import math

import pandas as pd
import pytest

from autotune.scoring.parity import loss_parity, relative_gap

PLAIN = [6.618, 4.494, 2.498, 0.957, 0.313, 0.125, 0.065, 0.043, 0.030, 0.022]
FOUR_BIT = [6.581, 4.507, 2.542, 0.983, 0.332, 0.132, 0.073, 0.055, 0.047, 0.041]


def test_the_gap_is_a_fraction_of_the_first_loss_not_of_a_vanishing_one():
    # Per step relative to each loss, the last step alone read 0.019 / 0.022 = 86 %.
    assert relative_gap(FOUR_BIT, PLAIN) == pytest.approx(0.044 / 6.618)
    assert relative_gap(PLAIN, PLAIN) == 0
    assert relative_gap(FOUR_BIT, []) is None and relative_gap([], PLAIN) is None
    assert relative_gap([math.nan, 5.0], [6.0, 4.0]) == pytest.approx(1 / 6)


def test_each_trial_that_changes_the_optimizers_numbers_is_compared_with_its_plain_twin():
    base = {"checkpointing": "none", "precision": "bf16", "micro_batch": 8, "accumulation": 1, "status": "ok"}
    df = pd.DataFrame([{**base, "losses": PLAIN},
                       {**base, "checkpointing": "full", "optimizer_state": "4bit", "losses": FOUR_BIT},
                       {**base, "micro_batch": 4, "accumulation": 2, "weights": "bf16", "losses": FOUR_BIT}])
    parity = loss_parity(df)
    assert math.isnan(parity[0])  # the plain optimizer changes nothing
    assert parity[1] == pytest.approx(0.044 / 6.618)  # checkpointing does not change the numbers
    assert math.isnan(parity[2])  # no plain twin at micro-batch 4 and no reference run
