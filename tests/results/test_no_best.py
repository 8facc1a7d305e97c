"""What a run without a winner leads with: the causes, commonest first, or how far the
smallest configuration was from the budget."""
import pandas as pd

from autotune.results.outputs import no_best, summary


def _rows(*rows):
    return pd.DataFrame(
        [dict(zip(("number", "status", "cause", "peak_memory_gib", "fits_budget"), r, strict=False)) for r in rows]
    )


def test_nothing_ran_ok_lists_each_cause_with_its_count_commonest_first():
    scored = _rows((0, "error", "KeyError: 'x'", None, False), (1, "oom", "CUDA out of memory", None, False),
                   (2, "oom", "CUDA out of memory", None, False), (3, "skipped", "bf16: not supported", None, False))
    headline, causes = no_best(scored)
    assert headline == "nothing ran ok: all 4 trial(s) ended 2 oom, 1 error, 1 skipped"
    assert causes[0] == "2 x oom: CUDA out of memory"
    assert set(causes[1:]) == {"1 x error: KeyError: 'x'", "1 x skipped: bf16: not supported"}
    text = summary(scored, None, "roi")
    assert text.index("nothing ran ok") < text.index("2 x oom: CUDA out of memory")


def test_runs_that_all_exceed_the_budget_name_the_smallest_peak():
    scored = _rows((0, "ok", None, 3.5, False), (1, "ok", None, 2.25, False), (2, "oom", "out of memory", None, False))
    headline, causes = no_best(scored)
    assert headline == "no configuration fits the budget: 2 ran ok, the smallest peaked at 2.250 GiB (trial 1)"
    assert causes == ["1 x oom: out of memory"]


def test_a_long_tail_of_causes_is_cut_and_says_where_the_rest_are():
    scored = _rows(*[(i, "error", f"cause {i}", None, False) for i in range(8)])
    headline, causes = no_best(scored, most=5)
    assert len(causes) == 6 and causes[-1] == "... and 3 other cause(s) (trials.csv, column cause)"
