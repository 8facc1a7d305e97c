"""Loaded by ``python bench/cpu_default.py --no-native-half`` (PYTHONPATH): the CPU's
bf16/fp16 detection says no, as on a CPU without avx512_bf16/AMX, so the run skips those
precisions as such a machine's would. Only the detection is changed: the timings are this
CPU's fp32."""
import torch


class _No:
    """An op that answers False, with the ``.default`` overload that code walking
    ``torch.ops`` (torchao, imported by transformers) looks up on every op."""

    def __call__(self, *args, **kwargs):
        return False

    @property
    def default(self):
        return self


torch.ops.mkldnn._is_mkldnn_bf16_supported = _No()
torch.ops.mkldnn._is_mkldnn_fp16_supported = _No()
