"""helpers.fusion: kernel counts from the profiler, traffic estimates, generated-code parsing."""

import os

import pytest
import torch
from conftest import one_line

from helpers import fusion, noise, opcount
from helpers.models import torchvision_model


def chain(x):
    return torch.relu(x * 2.0 + 1.0) * 0.5


def test_eager_kernels_are_the_ops_called_not_their_internals():
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()
    count = fusion.count_kernels(mlp, torch.randn(3, 8), device="cpu")
    # linear calls t (a view) and addmm internally: one kernel each, views not counted
    assert count.kernels == ["aten::linear", "aten::relu", "aten::linear"]
    assert fusion.count_kernels(chain, torch.randn(16), device="cpu").n == 4


def test_compiled_chain_is_one_kernel_and_matches_eager():
    import torch._inductor.config as inductor_config

    x = torch.randn(64, 32)
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):  # what enable_cpu_kernel_profiling() sets
        compiled = torch.compile(chain)
        torch.testing.assert_close(compiled(x), chain(x))
        count = fusion.count_kernels(compiled, x, device="cpu")  # may recompile (inference mode): flag still on
    assert count.n == 1, count.kernels
    assert "cpp_fused" in count.kernels[0], count.kernels


def test_compiled_without_kernel_profiling_is_refused_with_a_clear_message():
    import torch._inductor.config as inductor_config

    def other_chain(x):
        return torch.sigmoid(x * 3.0) + 2.0

    x = torch.randn(8, 16)
    with inductor_config.patch({"cpp.enable_kernel_profile": False}):
        compiled = torch.compile(other_chain)
        compiled(x)
        with pytest.raises(RuntimeError, match="enable_cpu_kernel_profiling") as info:
            fusion.count_kernels(compiled, x, device="cpu")
    assert one_line(info.value)


def test_traffic_counts_intermediates_and_the_fused_minimum():
    x = torch.randn(1000)  # 4000 bytes
    t = opcount.traffic(chain, x)
    assert t.ops == ["mul", "add", "relu", "mul"]
    # each op reads 4000 and writes 4000 (the Python scalars are not tensors in aten's view)
    assert t.unfused == 4 * 8000
    assert t.fused == 8000  # x read once, the result written once
    # three intermediates, each written once and read once
    assert t.intermediate == 3 * 8000
    assert t.saving == pytest.approx(4.0)
    assert t.allocated == 4 * 4000
    assert t.outputs == 4000  # four new tensors, of which one is returned
    inplace = opcount.traffic(lambda v: (v * 2).relu_(), x)  # relu_ rewrites the product: no new tensor
    assert inplace.allocated == inplace.outputs == 4000


def test_traffic_follows_composite_ops_into_their_kernels():
    layer = torch.nn.Linear(100, 10)  # linear = a view of the weight (t) + addmm: one op that moves bytes
    x = torch.randn(4, 100)
    t = opcount.traffic(layer, x)
    assert t.ops == ["addmm"]
    # reads x (1600 B), the weight (4000 B) and the bias (40 B); writes the output (160 B)
    assert t.unfused == t.fused == 1600 + 4000 + 40 + 160
    assert t.intermediate == 0


def test_traffic_of_independent_ops_reads_the_input_once_when_fused():
    x = torch.randn(10, 100)
    t = opcount.traffic(lambda v: (v.sum(-1), v.amax(-1)), x)
    assert t.intermediate == 0
    assert t.fused == 4000 + 2 * 40
    assert t.reread == 4000  # the second op reads x again
    assert t.allocated == t.outputs == 2 * 40  # only the two small results are new
    assert t.unfused == t.fused + t.intermediate + t.reread


def test_traffic_adds_up_with_in_place_ops_and_residuals():
    block = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU(True))

    def residual(x):
        out = block(x)
        out += x  # an in-place add onto a tensor already written, reading the outside input again
        return torch.relu_(out)

    t = opcount.traffic(residual, torch.randn(2, 3, 8, 8))
    assert t.unfused == t.fused + t.intermediate + t.reread
    assert t.reread == 2 * 3 * 8 * 8 * 4  # x: read by the convolution, then again by the residual add
    resnet = torchvision_model("resnet18").eval()
    big = opcount.traffic(resnet, torch.randn(1, 3, 32, 32))
    assert big.unfused == big.fused + big.intermediate + big.reread


CPP_CODE = """
cpp_fused_add_relu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)
{
    std::atomic<int> inductor_cpu_integer_div_error{0};
    for(int64_t x0=0; x0<8; x0+=1) { out_ptr0[x0] = in_ptr0[x0] + 1; }
}
''')
def call(args):
    extern_kernels.addmm(a, b, c, out=buf0)
    cpp_fused_add_relu_0(buf0, buf1)
"""

TRITON_CODE = """
triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', '''
import triton
@triton_heuristics.pointwise(size_hints={'x': 8})
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    tmp0 = tl.load(in_ptr0 + xoffset)
''', device_str='cuda')
"""


def test_generated_code_parsing():
    assert fusion.kernel_names(CPP_CODE) == ["cpp_fused_add_relu_0"]
    assert fusion.extern_calls(CPP_CODE) == ["addmm"]
    excerpt = fusion.kernel_excerpt(CPP_CODE)
    assert excerpt.startswith('extern "C"')
    assert "#include" not in excerpt
    assert "integer_div" not in excerpt
    assert fusion.kernel_names(TRITON_CODE) == ["triton_poi_fused_add_0"]
    excerpt = fusion.kernel_excerpt(TRITON_CODE, max_lines=2)
    assert excerpt.startswith("def triton_poi_fused_add_0")
    assert "more lines" in excerpt
    assert "no generated kernel" in fusion.kernel_excerpt("def call(args):\n    pass\n")


def test_count_kernels_bad_input():
    with pytest.raises(TypeError, match="needs a function") as info:
        fusion.count_kernels(torch.randn(3))
    assert one_line(info.value)


def test_profiler_markers_dropped_other_stderr_kept(capfd):
    with noise.profiler_markers_silenced():
        os.write(2, b"USDT:2026-11-29 22:43:33 1:1 SyncActivityProfilerHandler.cpp:39] profiler_start\n")
        os.write(2, b"a real native error line\n")
    os.write(2, b"visible line\n")
    err = capfd.readouterr().err
    assert "profiler_start" not in err
    assert "a real native error line" in err
    assert "visible line" in err


def test_short_kernel_names():
    long = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar"
        "(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)"
    )
    assert fusion.short_kernel_name(long) == "at::native::vectorized_elementwise_kernel"
    assert fusion.short_kernel_name("sgemm_largek_lds64<true, false, 5>(float*, int)") == "sgemm_largek_lds64"
    assert fusion.short_kernel_name("triton_poi_fused_add_mul_relu_0") == "triton_poi_fused_add_mul_relu_0"
    assert fusion.KernelCount("cuda", ["void k<1>(int)", "aten::relu"]).short() == ["k", "aten::relu"]


def test_describe_gemm_reads_the_generated_code():
    template = "triton_tem_fused_addmm_gelu_0 = async_compile.triton('triton_tem_fused_addmm_gelu_0', '')"
    assert fusion.gemm_epilogue_fused(template)
    assert "with the activation fused" in fusion.describe_gemm(template)
    assert not fusion.gemm_epilogue_fused(CPP_CODE)
    assert "bias folded in (addmm)" in fusion.describe_gemm(CPP_CODE)
    after_mm = TRITON_CODE + "\n    extern_kernels.mm(a, b, out=buf0)\n"
    assert "fused into one kernel after it" in fusion.describe_gemm(after_mm)
    cpp_template = (
        CPP_CODE.replace("cpp_fused_add_relu_0", "cpp_fused_addmm_relu_0").replace(
            "    extern_kernels.addmm(a, b, c, out=buf0)\n", ""
        )
        + "// micro_gemm<float>(A, B, C)\n"
    )
    assert fusion.gemm_epilogue_fused(cpp_template)
    assert "cpp_fused_addmm_relu_0" in fusion.describe_gemm(cpp_template)
    assert not fusion.gemm_epilogue_fused(cpp_template + "    extern_kernels.mm(a, b, out=buf0)\n")


def test_cpu_gemm_template_takes_the_epilogue_with_freezing_and_max_autotune():
    # The real thing, small: Inductor's C++ GEMM template fuses the GELU into the GEMM (one kernel, no library
    # GEMM) when the weights are frozen constants and max-autotune may pick the template.
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    layer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).eval()
    x = torch.randn(32, 64)
    torch._dynamo.reset()
    settings = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"}
    with torch.no_grad(), inductor_config.patch(settings):
        out, codes = run_and_get_code(torch.compile(layer), x)
    torch._dynamo.reset()
    torch.testing.assert_close(out, layer(x), rtol=1e-4, atol=1e-4)
    assert fusion.gemm_epilogue_fused("\n".join(codes)), fusion.describe_gemm("\n".join(codes))
