"""The README is the front door: short, and every command and code block in it works as
written (the custom-model block is checked against its file in test_models.py)."""
import re
import shlex
import subprocess
import sys

import pytest
import torch
import yaml

from tests.conftest import ROOT, trial_env

README = (ROOT / "README.md").read_text()
MAX_BYTES = 10 * 1024


def blocks(language: str) -> list:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def autotune_commands() -> list:
    """Every ``python -m autotune ...`` / ``autotune ...`` command in a bash block, as typed,
    after the install step of a ``pip ... && ...`` line."""
    commands = []
    for block in blocks("bash"):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith(("python -m autotune", "autotune ")):
                    commands.append(part)
    return commands


def inline_commands() -> list:
    """The commands quoted in running text (`python -m autotune ...`, `autotune --help`)."""
    return [c for c in re.findall(r"`((?:python -m autotune|autotune)(?:\.\w+)? [^`]*)`", README)
            if c not in autotune_commands()]


def test_the_readme_is_at_most_10_kib():
    assert len(README.encode()) <= MAX_BYTES, f"README.md is {len(README.encode())} bytes; move detail to docs/"


def test_the_readme_shows_the_commands_it_promises():
    assert autotune_commands() == ["python -m autotune model=bert",
                                   "python -m autotune model=custom model.target=examples.custom_model.build"]
    assert "pip install torch==2.13.0 -e \".[test]\" && python -m pytest" in blocks("bash")[1]
    assert {"python -m autotune experiment=llama_1b_16gib trial.fidelity=full", "autotune --help",
            "python -m autotune.show RUN_DIR --budget 16"} <= set(inline_commands())


@pytest.mark.e2e
def test_every_command_in_the_readme_runs_as_written(tmp_path):
    """The bash blocks' commands run for real, each from a directory of its own (the custom
    model from the project root, where its module is importable) with only the run
    directory and the study storage pointed into the test's folder; the quoted ones that
    need a GPU are composed (``--cfg job``), the rest run."""
    env = trial_env()
    runs = {}
    for i, command in enumerate(autotune_commands()):
        run_dir = tmp_path / f"run{i}"
        argv = [sys.executable, *shlex.split(command)[1:]] if command.startswith("python ") else shlex.split(command)
        if "model=custom" in command:
            cwd = ROOT
            argv += ["search.n_trials=2"]  # the full auto search of the custom model is the same code, longer
        else:
            cwd = tmp_path
        argv += [f"hydra.run.dir={run_dir}", f"storage=sqlite:///{tmp_path / 'studies.db'}"]
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, command + "\n" + out.stdout[-3000:] + out.stderr[-3000:]
        for name in ("best.yaml", "trials.csv", "pareto.csv", "report.html", "pareto.png", "study.db"):
            assert (run_dir / name).is_file(), f"{command} wrote no {name}"
        runs[command] = run_dir
    for command in inline_commands():
        argv = shlex.split(command)
        argv = [sys.executable, *argv[1:]] if argv[0] == "python" else [sys.executable, "-m", "autotune", *argv[1:]]
        argv = [str(runs["python -m autotune model=bert"]) if a == "RUN_DIR" else a for a in argv]
        if argv[2] == "autotune" and "--help" not in argv:
            argv.append("--cfg=job")  # a GPU run: composed here, not run
        out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, command + "\n" + out.stdout[-2000:] + out.stderr[-2000:]


def test_the_training_loop_in_the_readme_runs_with_a_real_best_yaml(tmp_path):
    """The README's load_tuned loop, executed as shown, around a tiny BERT: the names it uses
    are the real API, and the tuned micro-batch, accumulation and precision reach the model."""
    from transformers import BertConfig, BertForSequenceClassification

    loop = next(b for b in blocks("python") if "load_tuned" in b)
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({
        "strategy": {"checkpointing": "full", "precision": "bf16", "micro_batch": 2, "accumulation": 3},
        "device": {"kind": "cpu"}, "model": {"name": "tiny"}, "measured": {"samples_per_s": 1.0}}))
    loop = re.sub(r'load_tuned\("[^"]+"\)', f'load_tuned("{path}")', loop)
    model = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                     intermediate_size=64, vocab_size=128))
    seen = []
    model.bert.encoder.layer[0].intermediate.dense.register_forward_hook(lambda m, i, o: seen.append(o.dtype))

    def batches(n):
        for _ in range(2):
            yield {"input_ids": torch.randint(0, 128, (n * 3, 8)), "labels": torch.randint(0, 2, (n * 3,))}

    def split(batch, k):
        return [{key: v.chunk(k)[j] for key, v in batch.items()} for j in range(k)]

    namespace = {"model": model, "batches": batches, "split": split, "torch": torch}
    exec(compile(loop, "README.md", "exec"), namespace)
    tuned = namespace["tuned"]
    assert (tuned.micro_batch, tuned.accumulation) == (2, 3)
    # 2 optimizer steps x 3 micro-steps, each forward run twice (full checkpointing), in bf16
    assert len(seen) == 2 * 3 * 2 and set(seen) == {torch.bfloat16}
