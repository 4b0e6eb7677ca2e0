"""Shared test settings: one CPU thread (the CI machine is shared) and a modest hypothesis profile."""
import torch
from hypothesis import settings

torch.set_num_threads(1)
settings.register_profile("stalebench", max_examples=30, deadline=None, derandomize=True)
settings.load_profile("stalebench")
