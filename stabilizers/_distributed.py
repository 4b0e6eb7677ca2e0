"""A Reduce (stabilizers.api) over torch.distributed, for data-parallel trainers (any backend).

    batch = PolicyBatch(..., reduce=TorchDistributedReduce())   # after init_process_group

It gathers 1-D tensors whose length differs per rank (each rank's active tokens): the lengths
first, then every tensor padded to the longest, then each trimmed back to its length.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


class TorchDistributedReduce:
    """all_gather of variable-size 1-D tensors over a torch.distributed process group (None = the default)."""

    def __init__(self, group: dist.ProcessGroup | None = None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("TorchDistributedReduce needs torch.distributed.init_process_group() to have run")
        self.group = group

    def all_gather(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``values`` (1-D, sizes may differ), in rank order; no gradient."""
        if values.dim() != 1:
            raise ValueError(f"all_gather expects a 1-D tensor, got shape {tuple(values.shape)}")
        values = values.detach().contiguous()
        world = dist.get_world_size(self.group)
        size = torch.tensor([values.numel()], dtype=torch.int64, device=values.device)
        sizes = [torch.empty_like(size) for _ in range(world)]
        dist.all_gather(sizes, size, group=self.group)
        lengths = [int(s) for s in sizes]
        if max(lengths) == 0:
            return [values.new_zeros(0) for _ in lengths]
        padded = values.new_zeros(max(lengths))
        padded[: values.numel()] = values
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=self.group)
        return [tensor[:length] for tensor, length in zip(gathered, lengths)]
