"""Notebook 08's inference loop, fixed, as a script for Nsight Systems and Nsight Compute.

Profile this script, not the notebook: Nsight Systems and Nsight Compute take CUDA's profiling interface (CUPTI),
which admits one subscriber per process, so a ``torch.profiler`` in the same process records no GPU activity (and
the notebook's cells that divide by device time fail). This script runs no ``torch.profiler``. It warms up (cuDNN's
algorithm choice, the allocator), then records ``--requests`` requests between ``cudaProfilerStart`` and
``cudaProfilerStop`` (``nsys --capture-range=cudaProfilerApi``), each in an NVTX range, with ``preprocess``,
``model`` and ``postprocess`` ranges inside. The commands are in notebook 08, section 3::

    nsys profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi --pytorch=autograd-nvtx \\
        -o outputs/traces/08 .venv/bin/python scripts/profile_nsight.py
    ncu --set full --profile-from-start off --nvtx --nvtx-include "model/" -c 5 -o outputs/traces/08-kernels \\
        .venv/bin/python scripts/profile_nsight.py --requests 1

Without a CUDA GPU it says so in one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: its shared command-line types
import torch
from cli_types import positive_int  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.data import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from helpers.fp32 import exact_fp32  # noqa: E402
from helpers.models import torchvision_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--requests", type=positive_int, default=3, help="requests recorded after the warm-up (default 3)"
    )
    parser.add_argument("--batch", type=positive_int, default=16, help="frames per request (default 16)")
    parser.add_argument(
        "--image", type=positive_int, default=160, help="frame side in pixels (default 160, as notebook 08)"
    )
    args = parser.parse_args(argv)
    if min(args.requests, args.batch, args.image) < 1:
        parser.error("--requests, --batch and --image must be at least 1")
    if not torch.cuda.is_available():
        print("profile_nsight.py profiles an NVIDIA GPU, and torch sees no CUDA GPU here: nothing to record.")
        return 2
    exact_fp32()  # as the notebook: fp32 means fp32
    model = torchvision_model("resnet18", device="cuda").eval()
    frames = torch.randint(0, 256, (args.batch, args.image, args.image, 3), dtype=torch.uint8).pin_memory()
    mean = torch.tensor(IMAGENET_MEAN, device="cuda").view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device="cuda").view(1, 3, 1, 1)

    def request() -> torch.Tensor:
        with torch.cuda.nvtx.range("preprocess"):  # raw uint8 frames to the GPU, normalised there
            x = frames.to("cuda", non_blocking=True).permute(0, 3, 1, 2).float().div(255).sub(mean).div(std)
            x = x.contiguous()  # NCHW, as the model's weights: no re-layout inside the convolutions
        with torch.cuda.nvtx.range("model"), torch.inference_mode():
            out = model(x)
        with torch.cuda.nvtx.range("postprocess"):
            return out.softmax(1).max(1).values.cpu()  # one read-back per request

    for _ in range(3):  # warm-up, outside the capture
        request()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for i in range(args.requests):
        with torch.cuda.nvtx.range(f"request {i}"):
            request()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"recorded {args.requests} requests of {args.batch} frames between cudaProfilerStart and cudaProfilerStop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
