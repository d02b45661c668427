"""Kernel-name Tensor Core rules that said "yes" (or nothing) for the wrong reason.

a wrong Tensor Core verdict puts
an elementwise kernel under a Tensor Core roof, or leaves a matrix-core
convolution without one.  Names from the stored MI300X traces
(tests/data/tensor_core_kernels.csv has them all, with evidence).
"""

from __future__ import annotations

import pytest

from kinetolens.registry.tensor_cores import NO, YES, classify


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        # Inductor pointwise/reduction kernels named after the fused ops ("fmha") issue no tl.dot.
        ("triton_poi_fused__to_copy_add_cat_fmha_v3_fwd_mul_neg_stack_unbind_unsqueeze_view_13", NO),
        ("triton_red_fused__to_copy_add_addmm_as_strided_fmha_v3_fwd_mean_mul_neg_pow_rsqrt_stack_unbind_"
         "unsqueeze_view_24", NO),  # fmt: skip
        # MIOpen elementwise "OpTensor" kernels are not CUTLASS tensor-op GEMMs.
        ("SubTensorOpWithScalar1d", NO),
        ("SubTensorOpWithCastTensor1d", NO),
        ("Im2d2Col_v2", NO),
        # MIOpen asm implicit-GEMM convolutions on xdlops (MFMA).
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x1_1x4x1x64", YES),
    ],
)
def test_verdicts(name: str, verdict: str) -> None:
    assert classify(name)[0] == verdict


def test_composable_kernel_namespace_is_not_a_tensor_op_rule() -> None:
    # Every composable-kernel name holds ``ck::tensor_operation``; the XDL
    # rule, not the CUTLASS one, is what says a CK conv runs on matrix cores.
    name = ("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_34Gridwise"
            "GemmMultiD_xdl_cshuffle_v3")  # fmt: skip
    assert classify(name) == (YES, "ROCm composable-kernel XDL / MFMA kernel")
