"""A quiet start (autotune/system/quiet.py): torchao's known-harmless import lines are dropped
at autotune's entry points, matched exactly; anything else those loggers say still shows."""
import logging
import re
import subprocess
import sys

import pytest

from autotune.system.quiet import KNOWN_HARMLESS, quiet_third_party

EXAMPLES = {  # one real line per filter, as torchao 0.18 and torch 2.13 print them
    "Failed to load": "Failed to load /site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: "
                      "Could not load this library: /site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so",
    "Skipping import": "Skipping import of cpp extensions due to incompatible torch version. Please upgrade to "
                       "torch >= 2.11.0 (found 2.10.0).",
    "Warning: Detected": "Warning: Detected no triton, on systems without Triton certain kernels will not work",
    "<enum": "<enum 'KernelPreference'> is an Enum subclass and is now natively supported by torch.compile as an "
             "opaque value type. Calling register_constant() on Enum subclasses is deprecated and will be an "
             "error in a future release.",
}


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_each_known_line_is_dropped_and_the_rest_of_its_logger_still_shows():
    quiet_third_party()
    quiet_third_party()  # idempotent: one filter a line
    for name, pattern, why in KNOWN_HARMLESS:
        logger = logging.getLogger(name)
        assert sum(getattr(f, "pattern", None) is not None and f.pattern.pattern == pattern
                   for f in logger.filters) == 1
        assert why
        example = next(v for v in EXAMPLES.values() if re.search(pattern, v))
        sink = Collect()
        logger.addHandler(sink)
        try:
            logger.warning(example)
            logger.warning("note: " + example)  # not the exact line: shows
            logger.warning("Failed to load the model weights")  # another message of the logger: shows
        finally:
            logger.removeHandler(sink)
        assert sink.messages == ["note: " + example, "Failed to load the model weights"], (name, sink.messages)


def test_importing_torchao_at_an_entry_point_prints_none_of_the_known_lines():
    """Against the same import without the filters: where this machine's torchao prints one of
    the lines, the quiet start drops it (torchao's import prints them only on some builds)."""
    code = "import logging; logging.basicConfig(); {} import torchao.optim"
    loud = subprocess.run([sys.executable, "-c", code.format("")], capture_output=True, text=True, timeout=300)
    printed = [k for k in EXAMPLES if k in loud.stderr]
    if loud.returncode != 0 or not printed:
        pytest.skip(f"torchao's import prints none of the known lines here (rc {loud.returncode})")
    quiet = subprocess.run(
        [
            sys.executable,
            "-c",
            code.format("from autotune.system.quiet import quiet_third_party; quiet_third_party();"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert not [k for k in printed if k in quiet.stderr], quiet.stderr
