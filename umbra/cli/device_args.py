"""The --device option of the commands that train (`umbra tune`, `umbra tune shared|experts`).
Torch-free at import (building the parser stays cheap); the command resolves it with
umbra/model/device.py, so a device this machine lacks is a usage error, never a silent CPU."""

from __future__ import annotations


def add_device_arg(p) -> None:
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="where the client's blocks train: auto (a CUDA accelerator when there is one, else the "
                        "CPU), cpu, cuda or cuda:N; middle blocks run in this process (--in-process) run there too, "
                        "a cloud's where the cloud is (default: %(default)s)")
