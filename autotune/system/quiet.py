"""Known-harmless third-party log lines, silenced at autotune's entry points.

Importing a Hugging Face model imports torchao (transformers' quantizers do), and torchao's
import logs lines a newcomer reads as errors before autotune's first line. Each filter below
drops one message of one logger, matched exactly, with the reason it is harmless here;
any other message of those loggers, and every other logger, still shows. Called by the CLI,
the trial process (and its fork server) and the examples, not on ``import autotune``: a
library does not change its host's logging.
"""
from __future__ import annotations

import logging
import re
from re import Pattern

# (logger, message pattern, why it is harmless to autotune)
KNOWN_HARMLESS = (
    ("torchao", r"^Failed to load .*torchao/_C\w*(\.cpython-\d+-[\w-]+|\.abi3)?\.so: ",
     "torchao's optional C++/CUDA kernels built for other CUDA versions or GPUs (mxfp8, CUTLASS "
     "sm90a); autotune uses torchao's optimizers, which are Python and torch.compile"),
    ("torchao", r"^Skipping import of cpp extensions due to incompatible torch version\. ",
     "the same kernels, skipped on an older torch; torchao's optimizers do not need them"),
    ("torchao.kernel.intmm",
     r"^Warning: Detected no triton, on systems without Triton certain kernels will not work$",
     "torchao's int8 matmul kernels, which autotune does not use"),
    ("torch.utils._pytree", r"^<enum '\w+'> is an Enum subclass and is now natively supported by "
     r"torch\.compile as an opaque value type\. Calling register_constant\(\) on Enum subclasses is "
     r"deprecated",
     "torchao registers its enums with pytree as older torch needed; newer torch says it no "
     "longer has to, a change for torchao to make"),
)


class _DropMessage(logging.Filter):
    def __init__(self, pattern: Pattern) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def quiet_third_party() -> None:
    """Drop the KNOWN_HARMLESS messages (idempotent)."""
    for name, pattern, _why in KNOWN_HARMLESS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessage) and f.pattern.pattern == pattern for f in logger.filters):
            logger.addFilter(_DropMessage(re.compile(pattern)))
