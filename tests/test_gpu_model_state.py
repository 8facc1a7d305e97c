"""GPU path of the model-state dimensions: each lowers the device peak by what its bytes
predict, in real CUDA trials of one small Llama; the loss-parity figure of a real search."""
import pandas as pd
import pytest

from autotune.trial.runner import ForkServer
from tests.conftest import run_cli, trial_env

pytestmark = pytest.mark.gpu

LLAMA = {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4, "num_attention_heads": 16,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 512}


# Each model-state dimension's trial, and the bytes a parameter it should save against plain
# AdamW's 16 (bench/state_bytes.py prints the same figures).
STATE_RUNS = {"plain": {}, "8bit": {"optimizer_state": "8bit"}, "4bit": {"optimizer_state": "4bit"},
              "offload": {"optimizer_offload": True}, "bf16w": {"weights": "bf16"}}
SAVED_BYTES = {"8bit": 6, "4bit": 7, "bf16w": 8, "offload": 8}


def llama_spec(**state):
    return {"model": {"name": "llama", "target": "autotune.models.llama:build", "config": LLAMA},
            "seq_len": 256, "device": "cuda:0",
            "strategy": {"checkpointing": "none", "precision": "bf16", "micro_batch": 4, "accumulation": 1, **state},
            "warmup_steps": 2, "measure_steps": 5, "lr": 1e-4, "seed": 0}


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("state")
    runs = {**STATE_RUNS, "fused": {"optimizer_impl": "fused"}, "forloop": {"optimizer_impl": "forloop"}}
    # Through the fork server, as a search runs them (torchao imported in each child, not the server)
    forks = ForkServer("autotune.models.llama:build")
    try:
        out = {name: forks(llama_spec(**state), tmp / name, 600, env=trial_env()) for name, state in runs.items()}
    finally:
        forks.close()
    for name, r in out.items():
        assert r["status"] == "ok", (name, r)
    return out


def params(r) -> float:
    """Parameters, in GiB of fp32: the plain trial's static memory is weights, gradients and two
    fp32 moments, 16 bytes a parameter."""
    return r["static_gib"] / 16 * 4


@pytest.mark.parametrize("name, saved_bytes_per_param", SAVED_BYTES.items())
def test_each_model_state_dimension_lowers_the_peak_as_its_bytes_predict(trials, name, saved_bytes_per_param):
    plain, r = trials["plain"], trials[name]
    predicted = params(plain) / 4 * saved_bytes_per_param  # GiB
    static_saved = plain["static_gib"] - r["static_gib"]
    # Quantised state keeps a scale per 256 values (8-bit) or 128 (4-bit), and the offloaded
    # optimizer keeps tensors under 4096 values on the device: within 3 % of the bytes.
    assert static_saved == pytest.approx(predicted, rel=0.03), (static_saved, predicted)
    peak_saved = plain["peak_allocated_gib"] - r["peak_allocated_gib"]
    # torchao's low-bit step dequantises one parameter's two moments to fp32 and requantises
    # them: a transient of about 10 bytes a value of the parameter being stepped (0.30 GiB
    # measured for 4-bit on the H100 with bench/state_bytes.py, the 32000 x 1024 embedding
    # and head being the largest). On this small model that is 40 % of what 4-bit saves; on
    # the 1.1B Llama (7 GiB saved) it is under 10 %. Allow 12 bytes a value of the largest.
    largest = LLAMA["vocab_size"] * LLAMA["hidden_size"]
    transient = 12 * largest / 2**30 if name in ("8bit", "4bit") else 0.0
    assert peak_saved >= 0.8 * predicted - transient, (name, peak_saved, predicted, transient,
                                                       plain["peak_allocated_gib"], r["peak_allocated_gib"])
    assert r["numerics"] == ("bf16 autocast" if name == "offload" else r["numerics"])


def test_fused_and_forloop_steps_hold_less_than_foreach_temporaries(trials):
    # foreach (CUDA's default) holds whole-list temporaries in the step; fused and for-loop do not.
    assert trials["fused"]["peak_allocated_gib"] <= trials["plain"]["peak_allocated_gib"]
    assert trials["forloop"]["peak_allocated_gib"] <= trials["plain"]["peak_allocated_gib"]
    assert trials["fused"]["optimizer"] == "AdamW" and trials["8bit"]["optimizer"] == "AdamW8bit"
    assert {r["isolation"] for r in trials.values()} == {"fork"}


def test_a_search_records_the_loss_parity_of_what_changes_the_optimizers_numbers(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("checkpointing: [none]\nprecision: [bf16]\nmicro_batch: {min: 4, max: 4}\n"
                     "optimizer_state: [default, 8bit]\nweights: [fp32, bf16]\n")
    cfg = ",".join(f"{k}:{v}" for k, v in LLAMA.items())
    out = run_cli(tmp_path / "run", "model=llama", f"model.config={{{cfg}}}", "seq_len=256", "global_batch=4",
                  f"search_space.path={space}", "search=grid", "trial.repeats=0", timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    t = pd.read_csv(tmp_path / "run" / "trials.csv")
    assert (t["status"] == "ok").all(), t[["status", "cause"]]
    changed = t[(t["optimizer_state"] == "8bit") | (t["weights"] == "bf16")]
    assert len(changed) == 3 and changed["loss_parity"].notna().all()
    # 2 warm-up and 5+ timed steps at lr 1e-4 on one batch: the low-bit and stochastically
    # rounded optimizers follow the plain one closely.
    assert (changed["loss_parity"] < 0.05).all(), changed[["optimizer_state", "weights", "loss_parity"]]
    assert t.loc[(t["optimizer_state"] == "default") & (t["weights"] == "fp32"), "loss_parity"].isna().all()
