"""Credentials, hostile values and readers: what a run must not leak, run or write (CPU, real
processes; the PostgreSQL tests use the server .ci/run starts)."""
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from sqlalchemy.engine import make_url

from autotune.store.storage import make_storage, redact
from tests.conftest import ROOT, cli_command, trial_env
from tests.test_reliability import faulty, space_file

pytestmark = pytest.mark.e2e  # python -m autotune, show and report on hostile input, end to end


def postgres_url(variable: str = "AUTOTUNE_TEST_POSTGRES"):
    url = os.environ.get(variable)
    if url is None:
        if os.environ.get("CI"):
            pytest.fail(f"{variable} is not set: .ci/run starts PostgreSQL and sets it")
        pytest.skip("no PostgreSQL here (set AUTOTUNE_TEST_POSTGRES=postgresql://...; CI does)")
    return url


def every_file(folder: Path):
    return [p for p in folder.rglob("*") if p.is_file()]


def test_redaction_masks_each_credential_form_and_nothing_else():
    assert redact("postgresql://tuner:s3cr%40t@db:5432/s") == "postgresql://tuner:***@db:5432/s"
    assert redact("postgresql://tuner@db/s?sslmode=require&password=hunter2") == \
        "postgresql://tuner@db/s?sslmode=require&password=***"
    assert redact("host=db user=tuner password='x y z' dbname=s") == "host=db user=tuner password=*** dbname=s"
    # A short password masks the URL's credential, not the same characters elsewhere.
    url = "postgresql://u:a@h/db"
    assert redact(f"{url} trial.seed=1 apostgresql", url) == "postgresql://u:***@h/db trial.seed=1 apostgresql"
    # A longer one is masked wherever it appears, decoded as a driver would print it.
    url = "postgresql://u:p%40ssw0rd@h/db"
    assert redact("FATAL: p@ssw0rd rejected", url) == "FATAL: *** rejected"
    for harmless in ("sqlite:////tmp/a:b@c.db", "journal:/x/y.log", "postgresql://u@h/db?passfile=/p/.pgpass"):
        assert redact(harmless) == harmless


def test_workers_start_when_the_study_name_needs_quoting(tmp_path):
    """Item 8: the started workers get the name (and the storage) by environment, not argv."""
    url = f"journal:{tmp_path / 'studies.log'}"
    name = "tuner, v2 [a=b] it's"
    quoted = "study_name='" + name.replace("'", "\\'") + "'"
    args = faulty(tmp_path, "model.config.step_sleep=0.5", "global_batch=8", f"storage={url}", quoted,
                  "workers=2", space=space_file(tmp_path, lo=1, hi=4))
    run = tmp_path / "run dir, [1]"  # a run directory whose path needs quoting too
    out = subprocess.run(cli_command(run, *args), cwd=ROOT, env=trial_env(), capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 workers on the study" in out.stdout and "worker 1 started" in out.stdout
    worker_log = (run / "workers" / "1" / "worker.log").read_text()
    assert f"study '{name}'" in worker_log, worker_log
    st = optuna.load_study(study_name=name, storage=make_storage(url))
    owners = {t.user_attrs["owner"]["pid"] for t in st.get_trials(deepcopy=False) if "owner" in t.user_attrs}
    assert len(owners) == 2, owners  # both drivers measured: the worker did not fall back to another study
    assert optuna.get_all_study_names(make_storage(url)) == [name]


def test_a_password_reaches_no_output_no_argv_and_no_hydra_file(tmp_path):
    """Item 3, and issue 28 item 2: the query-string and the userinfo forms, through a run with
    a worker and the readers; the study's attributes in the database too. The role's password
    holds / # ? , : ; % @ (.ci/run makes it), which hand-written URL patterns once let through."""
    url = postgres_url("AUTOTUNE_TEST_POSTGRES_HOSTILE")
    parsed = make_url(url)
    password = parsed.password
    assert password and set("/#?,:;%@") <= set(password), "the test role's password holds the hostile characters"
    raw = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]  # as written in the URL
    query_form = (f"postgresql://{parsed.username}@{parsed.host}:{parsed.port}/{parsed.database}"
                  f"?sslmode=disable&password={raw}")
    assert make_url(query_form).query["password"] == password
    space = space_file(tmp_path, lo=2, hi=4)
    for form, given in (("query", query_form), ("userinfo", url)):
        name = f"secret-{form}-{os.getpid()}-{time.time_ns()}"
        run = tmp_path / form
        args = faulty(tmp_path, "model.config.step_sleep=0.3", "global_batch=8", f"storage='{given}'",
                      f"study_name={name}", "workers=2", space=space)
        proc = subprocess.Popen(cli_command(run, *args), cwd=ROOT, env=trial_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        argvs = set()
        while proc.poll() is None:  # every process the run starts, as ps shows it
            ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
            argvs.update(line for line in ps.splitlines() if "autotune" in line)
            time.sleep(0.2)
        stdout = proc.stdout.read()
        assert proc.returncode == 0, stdout
        assert any("workers=1" in a for a in argvs), argvs  # the worker was seen
        # Only the command the user typed holds the URL (AUTOTUNE_STORAGE keeps it out of that too).
        assert not [a for a in argvs if "workers=1" in a and password in a], argvs
        secrets = {password, raw}
        assert not [s for s in secrets if s in stdout], stdout
        assert not [a for a in argvs if "workers=1" in a and any(s in a for s in secrets)], argvs
        written = every_file(run)
        assert any(p.parent.name == ".hydra" for p in written) and (run / "workers/1/.hydra").is_dir()
        for path in written:
            assert not [s for s in secrets if s.encode() in path.read_bytes()], (form, path)
        st = optuna.load_study(study_name=name, storage=make_storage(given))
        assert not [s for s in secrets if s in repr(st.user_attrs) + repr([t.user_attrs for t in st.trials])]
        for reader in ("autotune.show", "autotune.report"):
            extra = ["--out", str(tmp_path / f"rebuilt-{form}")] if reader == "autotune.report" else []
            r = subprocess.run([sys.executable, "-m", reader, given, "--study", name, *extra], cwd=ROOT,
                               env=trial_env(), capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stdout + r.stderr
            assert not [s for s in secrets if s in r.stdout + r.stderr]
        for path in every_file(tmp_path / f"rebuilt-{form}"):
            assert not [s for s in secrets if s.encode() in path.read_bytes()], path


HOSTILE = "h/o#s?t,i:l;e%x@1"  # the characters URL patterns trip over
HOSTILE_RAW = "h/o#s?t,i:l;e%25x%401"  # as written in a URL: '%' and '@' encoded


def test_a_password_in_a_sqlite_url_query_reaches_no_output(tmp_path):
    """Issue 28 item 2 without a server: SQLite ignores a ?password= (with a warning), so a run
    on such a URL ends and writes everything; none of it may hold the value, nor a file name
    (a lock file once took the URL's whole text as its name)."""
    url = f"sqlite:///{tmp_path / 'studies.db'}?password={HOSTILE_RAW}"
    run = tmp_path / "run"
    out = subprocess.run(cli_command(run, *faulty(tmp_path, "global_batch=4", f"storage='{url}'",
                                                  space=space_file(tmp_path, "[none]", 2, 4))),
                         cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    secrets = (HOSTILE, HOSTILE_RAW)
    assert not [s for s in secrets if s in out.stdout + out.stderr], out.stdout + out.stderr
    written = every_file(tmp_path)
    assert (run / "best.yaml").is_file() and (run / ".hydra" / "overrides.yaml").is_file()
    for path in written:
        assert not [s for s in secrets if s in str(path) or s.encode() in path.read_bytes()], path
    for reader in ("autotune.show", "autotune.report"):
        r = subprocess.run([sys.executable, "-m", reader, url, *(["--out", str(tmp_path / "again")]
                                                                  if reader == "autotune.report" else [])],
                           cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not [s for s in secrets if s in r.stdout + r.stderr], r.stdout + r.stderr


def test_a_storage_that_cannot_be_reached_names_it_without_its_password(tmp_path):
    """Issue 28 item 2: the error path (no server listens on port 9) masks both forms."""
    for form, url in (("userinfo", f"postgresql://tuner:{HOSTILE_RAW}@127.0.0.1:9/studies"),
                      ("query", f"postgresql://tuner@127.0.0.1:9/studies?password={HOSTILE_RAW}")):
        run = tmp_path / form
        out = subprocess.run(cli_command(run, *faulty(tmp_path, f"storage='{url}'")), cwd=ROOT, env=trial_env(),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 2 and "cannot" in out.stdout + out.stderr, out.stdout + out.stderr
        assert "Traceback" not in out.stdout + out.stderr
        assert not [s for s in (HOSTILE, HOSTILE_RAW) if s in out.stdout + out.stderr], out.stdout + out.stderr
        for path in every_file(run):
            assert not [s for s in (HOSTILE, HOSTILE_RAW) if s.encode() in path.read_bytes()], path


def _snapshot(folder: Path) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}


def test_show_and_report_write_nothing_into_or_beside_what_they_read(tmp_path):
    """Item 5: a foreign SQLite file, an empty file, missing paths, a study not made by
    autotune (SQLite and journal): each refused with a message, each left as it was."""
    import sqlite3

    folder = tmp_path / "data"
    folder.mkdir()
    with sqlite3.connect(folder / "foreign.db") as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    (folder / "empty.db").write_bytes(b"")
    plain = optuna.create_study(study_name="plain", storage=f"sqlite:///{folder / 'plain.db'}")
    plain.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "plain.log")))
    optuna.create_study(study_name="plain", storage=journal).optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    before = _snapshot(folder)
    cases = {str(folder / "foreign.db"): "holds no study", str(folder / "empty.db"): "holds no study",
             f"sqlite:///{tmp_path / 'missing' / 'x.db'}": "no such file",
             f"journal:{tmp_path / 'missing' / 'x.log'}": "no such journal file",
             str(folder / "plain.db"): "settings", str(folder / "plain.log"): "settings"}
    for path, message in cases.items():
        for reader in ("autotune.show", "autotune.report"):
            r = subprocess.run([sys.executable, "-m", reader, path], cwd=ROOT, env=trial_env(), capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 2 and message in r.stderr, (reader, path, r.stdout + r.stderr)
            assert "Traceback" not in r.stderr
    assert _snapshot(folder) == before  # not a byte, not a lock file, not a table
    assert not (tmp_path / "missing").exists()


def test_a_database_server_that_never_answers_ends_the_run_with_a_message(tmp_path):
    """Item 6: a TCP listener on loopback that accepts and stays silent."""
    import socket
    import threading

    from autotune.store.storage import PG_CONNECT_TIMEOUT_S

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    held = []
    threading.Thread(target=lambda: [held.append(listener.accept()) for _ in range(16)], daemon=True).start()
    url = f"postgresql://tuner:hunter2-long@127.0.0.1:{port}/studies"
    commands = [cli_command(tmp_path / "run", *faulty(tmp_path, f"storage={url}")),
                [sys.executable, "-m", "autotune.show", url]]
    for command in commands:
        start = time.monotonic()
        r = subprocess.run(command, cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=300)
        took = time.monotonic() - start
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert f"no answer within {PG_CONNECT_TIMEOUT_S} s" in out and "Traceback" not in out, out
        assert took < PG_CONNECT_TIMEOUT_S * 3, took  # one attempt, not a retry loop
        assert "hunter2-long" not in out
    assert held  # the driver did connect, and was left waiting
    listener.close()


def test_nonsense_and_impossible_paths_end_before_any_trial_without_a_traceback(tmp_path):
    """Issue 13, "Then": from the command line, every problem at once, exit 2, nothing run."""
    run = tmp_path / "run"
    r = subprocess.run(cli_command(run, *faulty(tmp_path, "budget_gib=nan", "trial.seed=-1", "trial.lr=-1",
                                                "roi.compute_price_per_hour=inf")),
                       cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    for key in ("budget_gib=nan", "trial.seed=-1", "trial.lr=-1.0", "roi.compute_price_per_hour=inf"):
        assert key in out, key
    assert not (tmp_path / "studies.db").exists()  # no study opened, no trial run
    r = subprocess.run(cli_command(run, *faulty(tmp_path, "storage=journal:/proc/autotune/studies.log")),
                       cwd=ROOT, env=trial_env(), capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert "storage journal:/proc/autotune/studies.log: cannot be created or opened there" in out
    # A run directory that cannot be made (Hydra makes it before autotune runs; as root, a
    # read-only outputs/ is writable, so an impossible path stands in for it).
    r = subprocess.run(cli_command(Path("/proc/autotune/run"), *faulty(tmp_path)), cwd=ROOT, env=trial_env(),
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert "the run directory /proc/autotune/run cannot be made or written" in out, out


def test_the_reproduce_command_pastes_into_a_shell_and_a_dollar_name_draws(tmp_path):
    """Issue 13, "Then": a study name that needs quoting and a model name with $...$ (which
    matplotlib would read as mathtext): the run writes every output, and its command, pasted
    into bash, resumes the same study."""
    import yaml

    run = tmp_path / "run"
    args = faulty(tmp_path, "study_name='my study, v1'", "model.name='$x^$ & co'", "global_batch=2",
                  space=space_file(tmp_path, checkpointing="[none]", lo=1, hi=2))
    r = subprocess.run(cli_command(run, *args), cwd=ROOT, env=trial_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run / "pareto.png").stat().st_size > 5000 and "$x^$ &amp; co" in (run / "report.html").read_text()
    command = yaml.safe_load((run / "best.yaml").read_text())["command"]
    assert command.startswith("python -m autotune ")
    pasted = command.replace("python -m autotune", f"{sys.executable} -m autotune", 1)
    again = subprocess.run(["bash", "-c", pasted], cwd=ROOT, env=trial_env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming study 'my study, v1'" in again.stdout and "0 new configuration(s)" in again.stdout, again.stdout


def test_every_row_of_the_reliability_table_names_a_test_that_exists():
    import re

    text = (ROOT / "docs" / "reliability.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| case", "| ---"))]
    named = re.findall(r"`(test_\w+\.py)::(\w+)`", text)
    assert len(rows) >= 20 and len(named) >= 20
    for line in rows:
        assert "::" in line or "same test" in line, line
    for module, name in named:
        files = list((ROOT / "tests").rglob(module))  # tests/<package>/test_*.py mirror the packages
        assert len(files) == 1 and f"def {name}(" in files[0].read_text(), (module, name)


def test_a_statement_stuck_behind_a_lock_ends_at_the_statement_timeout(tmp_path):
    """Item 6 on a real PostgreSQL server: another session holds the study table locked; the
    run and show end at the statement timeout (here 3 s, through the environment) with a
    message, where they used to wait as long as the lock."""
    import psycopg

    url = postgres_url()
    make_storage(url)  # Optuna's tables exist
    env = {**trial_env(), "AUTOTUNE_DB_STATEMENT_TIMEOUT_S": "3"}
    with psycopg.connect(url) as locker:
        locker.execute("LOCK TABLE studies IN ACCESS EXCLUSIVE MODE")  # held until the block ends
        commands = [cli_command(tmp_path / "run", *faulty(tmp_path, f"storage={url}")),
                    [sys.executable, "-m", "autotune.show", url]]
        for command in commands:
            start = time.monotonic()
            r = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            out = r.stdout + r.stderr
            assert r.returncode == 2 and "Traceback" not in out, out
            assert "or 3 s (statement)" in out and "statement timeout" in out, out
            assert time.monotonic() - start < 90
        locker.rollback()
