"""Put on PYTHONPATH by tests that need bf16 trials on a CPU (the model-state dimensions pair
with precision=bf16): the CPU's bf16 detection says yes, so the trials run where the CPU
has no avx512_bf16/AMX, with autocast emulating bf16. What they check (bytes held, peaks,
loss parity) does not depend on native bf16; only the speed would. The opposite of
bench/no_native_half."""
import torch


class _Yes:
    """An op that answers True, with the ``.default`` overload that code walking ``torch.ops``
    (torchao, imported by transformers) looks up on every op."""

    def __call__(self, *args, **kwargs):
        return True

    @property
    def default(self):
        return self


torch.ops.mkldnn._is_mkldnn_bf16_supported = _Yes()
