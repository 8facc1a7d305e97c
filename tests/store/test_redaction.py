"""Issue 28 item 2: a storage URL's password is masked whatever characters the URL parser
accepts in it, in the URL as written and wherever it travels (generated passwords)."""
from urllib.parse import parse_qs, quote, urlsplit

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from sqlalchemy.engine import make_url

from autotune.store.redaction import LITERAL_MIN, MASK, redact, redact_files

# What a password may hold: letters, digits and the characters hand-written patterns stopped at.
ALPHABET = "abcXYZ019-_.~/#?,@:%;=!$&'()*+[] "
PASSWORDS = st.text(alphabet=ALPHABET, min_size=1, max_size=24)


def encode(password: str, raw: list) -> str:
    """The password as a user may write it: each character as itself where the parser reads it
    back unchanged (``raw``), percent-encoded otherwise; '@', '%' and a space always encoded."""
    return "".join(c if keep and c not in "@% " else quote(c, safe="") for c, keep in zip(password, raw, strict=False))


def places(url: str) -> list:
    """Texts the URL travels in: the command line, Hydra's override list and config as YAML,
    a log line, an error message."""
    overrides = [f"storage={url}", "model=bert"]
    return [url, f"python -m autotune storage='{url}' model=bert", f"study 'x' in {url}",
            OmegaConf.to_yaml(OmegaConf.create({"task": overrides})), yaml.safe_dump({"storage": url}),
            f"storage {url}: cannot be opened (OperationalError: connection to {url} failed)"]


def assert_masked(text: str, url: str, password: str) -> None:
    masked = redact(text, url)
    if len(password) >= LITERAL_MIN:
        assert password not in masked, (text, masked)
    assert url not in masked or url == redact(url), (text, masked)


@settings(max_examples=300, deadline=None)
@given(password=PASSWORDS, raw=st.lists(st.booleans(), min_size=24, max_size=24))
def test_a_userinfo_password_is_masked_wherever_the_url_goes(password, raw):
    url = f"postgresql+psycopg://tuner:{encode(password, raw)}@db.example:5432/studies"
    assume(make_url(url).password == password)  # the parser reads this password back
    masked = redact(url)
    assert make_url(masked).password == MASK and make_url(masked).host == "db.example", masked
    assert make_url(masked).database == "studies" and make_url(masked).username == "tuner"
    for text in places(url):
        assert_masked(text, url, password)
        generic = redact(text)  # without being told the URL: found in the text by the parser
        assert "tuner:***@db.example" in generic or "tuner%3A%2A%2A%2A" in generic, (text, generic)


@settings(max_examples=300, deadline=None)
@given(password=PASSWORDS, raw=st.lists(st.booleans(), min_size=24, max_size=24))
def test_a_query_password_is_masked_to_its_end(password, raw):
    value = "".join(
        c if keep and c not in "@% &+#" else quote(c, safe="") for c, keep in zip(password, raw, strict=False)
    )
    url = f"postgresql://tuner@db.example/studies?sslmode=require&password={value}&application_name=at"
    assume(make_url(url).query.get("password") == password)
    query = parse_qs(urlsplit(redact(url)).query)
    assert query == {"sslmode": ["require"], "password": [MASK], "application_name": ["at"]}, redact(url)
    for text in places(url):
        assert_masked(text, url, password)


@settings(max_examples=100, deadline=None)
@given(password=PASSWORDS.filter(lambda p: len(p) >= LITERAL_MIN))
def test_hydras_files_keep_no_password_however_yaml_quotes_it(tmp_path_factory, password):
    url = f"postgresql://tuner:{quote(password, safe='')}@h/db"
    folder = tmp_path_factory.mktemp("hydra")
    OmegaConf.save(OmegaConf.create({"storage": url}), folder / "config.yaml")
    OmegaConf.save(OmegaConf.create([f"storage={url}", "x=1"]), folder / "overrides.yaml")
    redact_files(folder)  # found in the files without being told (as Hydra's own files hold it)
    for path in folder.iterdir():
        text = path.read_text()
        assert password not in text and quote(password, safe="") not in text, text
        assert "tuner:***@h/db" in text


def test_the_forms_the_old_patterns_let_through():
    """The issue's cases: '/', '#', '?' in the userinfo, ',' in the query."""
    assert redact("postgresql://u:pa/ss#w?rd@h/db") == "postgresql://u:***@h/db"
    assert redact("postgresql://u@h/db?password=first,second") == "postgresql://u@h/db?password=***"
    assert redact("storage=postgresql://u:x:y;z@h/db ok") == "storage=postgresql://u:***@h/db ok"
    assert redact("host=db user=tuner password='x y z' dbname=s") == "host=db user=tuner password=*** dbname=s"
