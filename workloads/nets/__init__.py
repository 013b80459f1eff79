"""The built-in workloads' PyTorch modules. Only workers import these (they import torch);
the definitions beside them, in workloads/, do not."""
