"""Short kernel names a person can read and tell apart: no return types, HIP
names demangled, nvcc lambdas named by their function, one line per cell."""

from __future__ import annotations

import json

from kinetolens.cli.render import fit_cell
from kinetolens.registry.demangle import demangle
from kinetolens.registry.kernel_names import short_kernel_name
from kinetolens.views import units
from tests.conftest import trace_path
from tests.terminal import run_cli

VLLM_RMS = (
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, "
    "float, int, int)"
)
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
CK_TILE = (
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF1"
    "6bDF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1ELi3072EEEENS5_IJLi1ELi128EEEENS5_IJLi1ELi8"
    "EEEEEENS_18Rmsnorm2dFwdTraitsILb1ELb0ELb0ELb0ELNS_21Rmsnorm2dFusedAddEnumE0ELNS_23Rmsnorm2dFusedQuantEnumE0ELN"
    "S_22Rmsnorm2dSensitiveEnumE0EEEEENS_33Rmsnorm2dFwdPipelineDefaultPolicyEEENS_17Default2DEpilogueINS_24Default2"
    "DEpilogueProblemIfDF16bLb0ELb1ELb0EEEvEEEEJNSM_5KargsEEEEvDpT1_"
)
CLOVER = (
    "void clover::par_ranged1d_kernel<update_halo_kernel(int, int, int, int, const std::array<int, (unsigned long)4> &, "
    "const std::array<int, (unsigned long)4> &, field_type &, const int *, int)::[lambda(int) (instance 58)]>"
    "(clover::Range1d, T1)"
)


def test_return_type_prefix_is_dropped() -> None:
    assert short_kernel_name(VLLM_RMS) == "vllm::fused_add_rms_norm_kernel<BFloat16>"


def test_hip_names_are_demangled() -> None:
    assert demangle(AITER) == "aiter::add_rmsnorm_quant_kernel<bfloat16, bfloat16, 256, 16, true, false, true, 1>"
    assert short_kernel_name(AITER).startswith("aiter::add_rmsnorm_quant_kernel<bfloat16, ")
    assert demangle(CK_TILE).startswith(
        "ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<ck_tile::Rmsnorm2dFwdPipelineOnePass<"
        "ck_tile::Rmsnorm2dFwdPipelineProblem<bfloat16, bfloat16, float, bfloat16, bfloat16, bfloat16, float, float, "
        "ck_tile::Generic2dBlockShape<ck_tile::sequence<1, 3072>, ck_tile::sequence<1, 128>, ck_tile::sequence<1, 8>>"
    )
    assert demangle("_Zfoo") == "_Zfoo" and demangle("plain_kernel") == "plain_kernel"


def test_nvcc_lambdas_keep_their_function_and_instance() -> None:
    assert short_kernel_name(CLOVER) == "clover::par_ranged1d_kernel<update_halo_kernel[lambda 58]>"


def test_a_cell_is_cut_or_wrapped_never_both() -> None:
    name = "indexSelectLargeIndex<BFloat16, long, unsigned int>"
    assert fit_cell(name, 30) == units.middle(name, 30)  # a name: one line
    assert fit_cell("optimizer 2,898, bprop 96", 12) == units.middle("optimizer 2,898, bprop 96", 12)
    assert fit_cell("Memcpy HtoD (Pageable -> Device)", 20) == "Memcpy HtoD\n(Pageable -> Device)"


def test_cloverleaf_kernel_rows_are_told_apart() -> None:
    path = str(trace_path("nsys/pipit_perlmutter-cloverleaf-cuda.sqlite"))
    proc = run_cli("ops", path, "--aggregate-by", "kernel", "-t", "40", columns=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines()[3:] if line[:1].strip() and "more columns" not in line]
    names = [line.split("  ")[0] for line in rows]
    assert len(names) == 40 and len(set(names)) == 40, names
    assert all(len(line) <= 120 for line in proc.stdout.splitlines())
    table = json.loads(run_cli("ops", path, "--aggregate-by", "kernel", "--json", columns=None).stdout)
    shorts = {short_kernel_name(r["name"]) for r in table}
    assert len(shorts) == len(table)
