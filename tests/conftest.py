"""Test-wide settings."""

import torch

# `make test` runs two pytest workers on two cores: one thread each avoids oversubscription, under
# which tiny torch ops were seen to take ~15 ms instead of microseconds.
torch.set_num_threads(1)
