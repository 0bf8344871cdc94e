"""Compatibility shims between the pinned mlx and mlx-lm for the reference
scripts."""

import mlx.core as mx


def gather_qmm_without_global_scale() -> None:
    """mlx-lm 0.32.2's quantized MoE layers pass `global_scale=None` to
    mx.gather_qmm, a keyword mlx before 0.32.3 does not have (the pinned 0.32.4
    has it, and this does nothing). Drop it when it is None (the only value
    affine quantization uses)."""
    if "global_scale" in (mx.gather_qmm.__doc__ or ""):
        return
    original = mx.gather_qmm

    def gather_qmm(*args, global_scale=None, **kwargs):
        if global_scale is not None:
            raise NotImplementedError("global_scale needs a newer mlx")
        return original(*args, **kwargs)

    mx.gather_qmm = gather_qmm
