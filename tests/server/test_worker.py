"""server/worker.py: one compute thread, decode first; once the middle is loaded each job runs as
one step of its device (umbra/model/transfer.py): on the CPU as is, on CUDA on a stream of its own."""

from __future__ import annotations

import threading

import pytest
import torch

from server.launch import local_cloud_thread
from server.worker import DECODE, ComputeWorker
from umbra.model.transfer import Transfer

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")


def test_jobs_run_on_one_thread_decode_first_and_as_cpu_steps_unchanged():
    worker = ComputeWorker(torch_threads=1)
    try:
        worker.use(Transfer("cpu"))
        gate, order = threading.Event(), []
        held = worker.submit(gate.wait, 30)  # holds the thread while the others queue
        normal = worker.submit(order.append, "normal")
        decode = worker.submit(order.append, "decode", priority=DECODE)
        gate.set()
        held.result(30), normal.result(30), decode.result(30)
        assert order == ["decode", "normal"]
        names = {worker.submit(lambda: threading.current_thread().name).result(30) for _ in range(3)}
        assert names == {"umbra-compute"}
        x = torch.randn(3)
        assert worker.submit(lambda: x * 2).result(30).equal(x * 2)
        with pytest.raises(ZeroDivisionError):
            worker.submit(lambda: 1 / 0).result(30)
        assert worker.submit(lambda: "still running").result(30) == "still running"
    finally:
        worker.shutdown()


def test_the_cloud_on_the_cpu_uses_no_stream(model_dir):
    with local_cloud_thread(model_dir, settings=dict(device="cpu", torch_threads=1)) as cloud:
        state = cloud.server.config.app.state.cloud
        assert state.runtime.transfer.device == torch.device("cpu") and not state.runtime.transfer.cuda


@needs_cuda
def test_the_cloud_on_cuda_runs_each_job_on_a_stream_of_its_own(model_dir):
    with local_cloud_thread(model_dir, settings=dict(device="cuda", torch_threads=1)) as cloud:
        worker = cloud.server.config.app.state.cloud.worker
        streams = [worker.submit(torch.cuda.current_stream).result(30) for _ in range(4)]
    default = torch.cuda.default_stream()
    # the pool's two streams in turn (a sweep job between two of these may shift the turn, never both)
    assert all(s != default for s in streams) and len({s.cuda_stream for s in streams}) == 2
